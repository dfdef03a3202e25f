//! Asks the host for an interface it does not provide.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "wit", world: "wants-a-vault" });

    struct Component;

    impl Guest for Component {
        fn run() -> String {
            test::unknown_import::vault::secret()
        }
    }

    export!(Component);
}
