//! Wireshark key logs, as pure formatting (the caller writes the files): lines of the
//! `ikev2_decryption_table` and `esp_sa` user tables, in the format strongSwan's save-keys
//! plugin writes and with the algorithm names Wireshark's IKEv2 and ESP dissectors list.
//! Only for debugging: these lines hold keys.
use crate::alg::{Encr, Integ};
use crate::event::{ChildSaInfo, IkeKeyLog};
use alloc::format;
use alloc::string::String;
use core::fmt::Write;
use core::net::IpAddr;

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// Wireshark's IKEv2 encryption algorithm name.
pub fn ike_encr_name(e: Encr) -> &'static str {
    match e {
        Encr::AesCbc128 => "AES-CBC-128 [RFC3602]",
        Encr::AesCbc256 => "AES-CBC-256 [RFC3602]",
        Encr::AesCbc192 => "AES-CBC-192 [RFC3602]",
        Encr::TripleDes => "3DES [RFC2451]",
        Encr::AesGcm16_128 => "AES-GCM-128 with 16 octet ICV [RFC5282]",
        Encr::AesGcm16_256 => "AES-GCM-256 with 16 octet ICV [RFC5282]",
        Encr::ChaCha20Poly1305 => "NULL [RFC2410]",
    }
}

/// Wireshark's IKEv2 integrity algorithm name.
pub fn ike_integ_name(i: Option<Integ>) -> &'static str {
    match i {
        None => "NONE [RFC4306]",
        Some(Integ::HmacSha1_96) => "HMAC_SHA1_96 [RFC2404]",
        Some(Integ::HmacSha256_128) => "HMAC_SHA2_256_128 [RFC4868]",
        Some(Integ::HmacSha384_192) => "HMAC_SHA2_384_192 [RFC4868]",
        Some(Integ::HmacSha512_256) => "HMAC_SHA2_512_256 [RFC4868]",
    }
}

/// Wireshark's ESP encryption algorithm name.
pub fn esp_encr_name(e: Encr) -> &'static str {
    match e {
        Encr::AesCbc128 | Encr::AesCbc256 | Encr::AesCbc192 => "AES-CBC [RFC3602]",
        Encr::TripleDes => "TripleDES-CBC [RFC2451]",
        Encr::AesGcm16_128 | Encr::AesGcm16_256 => "AES-GCM with 16 octet ICV [RFC4106]",
        Encr::ChaCha20Poly1305 => "ChaCha20 with Poly1305 [RFC7634]",
    }
}

/// Wireshark's ESP authentication algorithm name.
pub fn esp_integ_name(i: Option<Integ>) -> &'static str {
    match i {
        None => "NULL",
        Some(Integ::HmacSha1_96) => "HMAC-SHA-1-96 [RFC2404]",
        Some(Integ::HmacSha256_128) => "HMAC-SHA-256-128 [RFC4868]",
        Some(Integ::HmacSha384_192) => "HMAC-SHA-384-192 [RFC4868]",
        Some(Integ::HmacSha512_256) => "HMAC-SHA-512-256 [RFC4868]",
    }
}

/// One `ikev2_decryption_table` line (no newline):
/// `SPIi,SPIr,SK_ei,SK_er,"encr",SK_ai,SK_ar,"integ"`.
pub fn ikev2_line(k: &IkeKeyLog) -> String {
    format!(
        "{:016x},{:016x},{},{},\"{}\",{},{},\"{}\"",
        k.spi_i,
        k.spi_r,
        hex(&k.sk_ei),
        hex(&k.sk_er),
        ike_encr_name(k.suite.encr),
        hex(&k.sk_ai),
        hex(&k.sk_ar),
        ike_integ_name(k.suite.integ)
    )
}

fn family(a: IpAddr) -> &'static str {
    if a.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// The two `esp_sa` lines of a child SA (outbound, then inbound), no newlines:
/// `"IPv4","src","dst","0xSPI","encr","0xKEY","auth","0xKEY"`.
pub fn esp_sa_lines(c: &ChildSaInfo) -> [String; 2] {
    let (l, r) = (c.local.ip(), c.remote.ip());
    let line = |src: IpAddr, dst: IpAddr, spi: u32, ek: &[u8], ak: &[u8]| {
        format!(
            "\"{}\",\"{}\",\"{}\",\"0x{:08x}\",\"{}\",\"0x{}\",\"{}\",\"0x{}\"",
            family(src),
            src,
            dst,
            spi,
            esp_encr_name(c.suite.encr),
            hex(ek),
            esp_integ_name(c.suite.integ),
            hex(ak)
        )
    };
    [
        line(l, r, c.spi_out, &c.encr_out, &c.integ_out),
        line(r, l, c.spi_in, &c.encr_in, &c.integ_in),
    ]
}
