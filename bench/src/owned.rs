//! A process the benchmark starts (a server, a broker, etcd): killed and
//! waited for when dropped, so that a run that fails midway leaves nothing
//! running.

use std::process::Child;

/// A child process the benchmark owns.
pub struct Owned(Child);

impl Owned {
    /// Owns `child` from here on.
    pub fn new(child: Child) -> Owned {
        Owned(child)
    }

    /// The process's id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Kills the process and waits for it; once it is gone, does nothing.
    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.stop();
    }
}
