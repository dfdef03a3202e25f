//! Components written byte by byte, to attack what the host does before
//! any guest code runs: one core module of one function, of a body made to
//! be hard to compile.

/// A component of one function of `depth` nested empty blocks: valid,
/// 3 bytes a block, and compiling it takes memory in proportion to depth.
pub fn nested_blocks(depth: usize) -> Vec<u8> {
    let mut body = b"\x02\x40".repeat(depth);
    body.extend(b"\x0b".repeat(depth));
    component_of_one_function(&body)
}

/// A component of one function of `count` constants, each dropped: cheap
/// in memory, slow to compile in proportion to its length.
pub fn dropped_constants(count: usize) -> Vec<u8> {
    component_of_one_function(&b"\x41\x00\x1a".repeat(count))
}

/// A component holding a core module with one function `() -> ()` whose
/// instructions are `code` (its closing `end` added).
fn component_of_one_function(code: &[u8]) -> Vec<u8> {
    let mut function = vec![0]; // no locals
    function.extend(code);
    function.push(0x0b);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    module.extend(section(1, b"\x01\x60\x00\x00")); // one type: () -> ()
    module.extend(section(3, b"\x01\x00")); // one function of that type
    let mut bodies = leb128(1);
    bodies.extend(leb128(function.len()));
    bodies.extend(function);
    module.extend(section(10, &bodies));
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    component.extend(section(1, &module)); // a core module section
    component
}

fn section(id: u8, payload: &[u8]) -> Vec<u8> {
    let mut section = vec![id];
    section.extend(leb128(payload.len()));
    section.extend(payload);
    section
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            bytes.push(low);
            return bytes;
        }
        bytes.push(low | 0x80);
    }
}
