//! The control protocol's wire format, byte for byte: a scripted session's every response
//! and event line (each shape docs/control.md names) against `golden.txt`, so any change of a
//! field's name, order or wording shows here. `GOLDEN_UPDATE=1 cargo test -p ipsec-tunnel
//! as_documented` rewrites the file (then read its diff: it is the wire change).

use super::ike_sas::remove_ike_sas;
use super::requests::sa_config;
use super::*;
use std::fmt::Write as _;

const KEY: &str = "0x0102030405060708090a0b0c0d0e0f1011121314";

fn spec(spi: u32) -> String {
    format!("proto esp spi {spi:#x} mode tunnel src 10.99.0.1 dst 10.99.0.2 aead 'rfc4106(gcm(aes))' {KEY} 128")
}

/// Compares `got` with the golden file `name` (next to this file), or rewrites it.
pub(crate) fn check_golden(name: &str, got: &str) {
    let path = format!("{}/src/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("GOLDEN_UPDATE").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    for (i, (w, g)) in want.lines().zip(got.lines()).enumerate() {
        assert_eq!(g, w, "{path}:{}: the wire format changed", i + 1);
    }
    assert_eq!(
        got.lines().count(),
        want.lines().count(),
        "{path}: lines added or missing"
    );
}

struct Session {
    e: Engine,
    st: Registry,
    out: String,
}

impl Session {
    fn req(&mut self, now: u64, line: &str) {
        let h = handle(line.as_bytes(), &mut self.e, &mut self.st, Duration::from_secs(now));
        self.answer(line, &h);
    }

    fn answer(&mut self, line: &str, h: &Handled) {
        let _ = writeln!(self.out, "> {line}\n< {}", h.response);
        self.events(&h.events);
    }

    fn events(&mut self, evs: &[Event]) {
        for ev in evs {
            let _ = writeln!(self.out, "! {ev}");
        }
    }
}

/// Every control response and event shape, as the wire carries it.
#[test]
fn every_response_and_event_is_as_documented() {
    let mut s = Session {
        e: Engine::new(),
        st: Registry::default(),
        out: String::new(),
    };
    let sa_add = |name: &str, spi: u32, extra: &str| {
        format!(
            r#"{{"v":1,"op":"sa.add","name":"{name}","spec":"{}"{extra}}}"#,
            spec(spi)
        )
    };
    // Errors: the request's, the SA loader's, the registry's.
    for line in [
        "{not json",
        r#"{"v":2,"op":"show"}"#,
        r#"{"v":1,"op":"sa.frob"}"#,
        r#"{"v":1,"op":"sa.del","name":"nope"}"#,
        r#"{"v":1,"op":"ike.list"}"#,
    ] {
        s.req(0, line);
    }
    s.req(
        0,
        &sa_add("x", 0x10, r#","lifetime":{"soft":{"seconds":5},"hard":{"seconds":9}}"#),
    );
    s.req(0, &sa_add("y", 0x11, ""));
    s.req(0, &sa_add("y", 0x12, ""));
    s.req(
        0,
        r#"{"v":1,"op":"sa.add","name":"bad","spec":"proto esp spi 0x3003 aead 'rfc4106(gcm(aes))' 0x0011 128"}"#,
    );
    s.req(
        0,
        r#"{"v":1,"op":"policy.add","policy":{"dir":"out","src":"192.168.1.0/24","dst":"192.168.2.0/24","proto":"udp","action":"protect","bundle":["y"]}}"#,
    );
    s.req(
        0,
        r#"{"v":1,"op":"policy.add","policy":{"dir":"in","action":"bypass"}}"#,
    );
    s.req(0, r#"{"v":1,"op":"policy.list"}"#);
    s.req(0, r#"{"v":1,"op":"policy.del","index":2}"#);
    s.req(1, &sa_add("y", 0x13, "").replace("sa.add", "sa.update"));
    s.req(1, r#"{"v":1,"op":"sa.list"}"#);
    s.req(1, r#"{"v":1,"op":"sa.list","keys":true}"#);
    s.req(1, r#"{"v":1,"op":"sa.get","name":"x","keys":false}"#);
    s.req(1, r#"{"v":1,"op":"show"}"#);
    s.req(1, r#"{"v":1,"op":"monitor"}"#);
    s.req(1, r#"{"v":1,"op":"sa.del","name":"x"}"#);
    // Lifetimes: soft, then hard; the replaced `y` retired when idle.
    s.req(
        2,
        &sa_add("z", 0x20, r#","lifetime":{"soft":{"seconds":3},"hard":{"seconds":4}}"#),
    );
    for now in [6, 7] {
        let now = Duration::from_secs(now);
        s.e.poll(now);
        let evs: Vec<ipsec_engine::Event> = std::iter::from_fn(|| s.e.next_event()).collect();
        let out = after_tick(&mut s.e, &mut s.st, &evs, now, &mut Vec::new());
        s.events(&out);
    }
    // A reload: one SA added, one changed, one removed, the policies swapped.
    let cfg = |t: &str| ipsec_config::from_toml::parse(t).unwrap();
    let sa_toml = |name: &str, spi: u32| format!("[[sa]]\nname = \"{name}\"\nxfrm = \"{}\"\n", spec(spi));
    let text = sa_toml("y", 0x30)
        + &sa_toml("w", 0x31)
        + "[[policy]]\ndir = \"out\"\nsrc = \"10.0.0.0/8\"\naction = \"protect\"\nbundle = [\"w\"]\n";
    let applied = reload::apply(&mut s.e, &mut s.st, &cfg(&text), Duration::from_secs(8)).unwrap();
    s.events(&applied.events);
    s.events(&[Event::ConfigReloadFailed(event::ReloadFailed {
        time: 8,
        error: "x.toml: line 1: bad".into(),
    })]);
    // IKE's pairs: installed, the inbound one retired, the outbound one removed.
    let child = |dir: &str, spi: u32| {
        sa_config(&SaRequest {
            name: format!("ike:gw/net/{dir}-{spi:08x}"),
            spec: zeroize::Zeroizing::new(spec(spi)),
            lifetime: None,
        })
        .unwrap()
    };
    let sel = ipsec_engine::Selector::default();
    let mut evs = Vec::new();
    let c = ChildSas {
        out: child("out", 0xc000_0002),
        inb: child("in", 0xc000_0001),
        selectors: vec![(sel, sel)],
        before: None,
    };
    ike_sas::install_child(&mut s.e, &mut s.st, c, Duration::from_secs(9), &mut evs).unwrap();
    retire_ike_sa(
        &mut s.e,
        &mut s.st,
        ChildSaKey::inb(0xc000_0001),
        Duration::from_secs(9),
        &mut evs,
    );
    remove_ike_sas(
        &mut s.e,
        &mut s.st,
        &[ChildSaKey::out(0xc000_0001)],
        Duration::from_secs(9),
        &mut evs,
    );
    s.events(&evs);
    // An SA in UDP (its `encap` in the SA's view), an IPComp SA (no replay window, no
    // sequence numbers), an AH SA.
    s.req(
        9,
        &format!(
            r#"{{"v":1,"op":"sa.add","name":"u","spec":"{} encap espinudp 4500 4501 10.0.0.7"}}"#,
            spec(0x40)
        ),
    );
    s.req(
        9,
        r#"{"v":1,"op":"sa.add","name":"c","spec":"proto comp spi 0x4100 mode tunnel src 10.99.0.1 dst 10.99.0.2 comp deflate"}"#,
    );
    s.req(
        9,
        r#"{"v":1,"op":"sa.add","name":"h","spec":"proto ah spi 0x42 mode transport src 10.99.0.1 dst 10.99.0.2 auth 'hmac(sha256)' 0x0102030405060708090a0b0c0d0e0f100102030405060708090a0b0c0d0e0f10"}"#,
    );
    s.req(9, r#"{"v":1,"op":"sa.get","name":"u","keys":true}"#);
    s.req(9, r#"{"v":1,"op":"show"}"#);
    // The socket's own errors.
    let busy = Response::error(format!("busy: {MAX_CLIENTS} control clients connected; try again"));
    let _ = writeln!(s.out, "< {busy}");
    let many = Response::error(format!("too many monitors ({MAX_MONITORS}): try again later"));
    let _ = writeln!(s.out, "< {many}");
    check_golden("control/golden.txt", &s.out);
}
