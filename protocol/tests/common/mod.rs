//! What the protocol crate's integration tests share (each test uses what it needs).
#![allow(dead_code)]

/// The IP packet (Ethernet header cut off) of reference vector `name` (A-G) in
/// testdata/rocev2-vectors.txt: RoCEv2 packets produced independently of this crate.
pub fn vector_ip(name: char) -> Vec<u8> {
    let line = include_str!("../../../testdata/rocev2-vectors.txt")
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap();
    let frame: Vec<u8> = line[2..]
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    frame[14..].to_vec()
}

/// The REQ Linux's kernel CM sent for an `rdma_connect()` over rdma_rxe (captured in the VM).
pub fn linux_req_mad() -> Vec<u8> {
    include_str!("../../../testdata/cm-linux-req.txt")
        .lines()
        .find(|l| !l.starts_with('#'))
        .unwrap()
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}
