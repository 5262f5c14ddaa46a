//! The control protocol without sockets (requests against an engine), then through a real
//! Unix socket against a tunnel core whose packets go through the in-memory path.

use super::requests::sa_config;
use super::*;
use ipsec_engine::{DropReason, Verdict, Worker};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use zeroize::Zeroizing;

const KEY_OLD: &str = "0x0102030405060708090a0b0c0d0e0f1011121314";
const KEY_NEW: &str = "0xa1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4";

fn spec(spi: u32, key: &str) -> String {
    format!("proto esp spi {spi:#x} mode tunnel src 10.99.0.1 dst 10.99.0.2 aead 'rfc4106(gcm(aes))' {key} 128")
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn req(e: &mut Engine, st: &mut Registry, now: u64, v: Value) -> Handled {
    handle(v.to_string().as_bytes(), e, st, secs(now))
}

fn ok_of(h: &Handled) -> Value {
    let v = h.response.to_json();
    assert_eq!(v["ok"], true, "{}", h.response);
    v
}

fn err_of(h: &Handled) -> String {
    assert_eq!(h.response.to_json()["ok"], false, "{}", h.response);
    assert!(h.events.is_empty());
    h.response.to_json()["error"].as_str().unwrap().to_string()
}

fn add(e: &mut Engine, st: &mut Registry, name: &str, spi: u32, key: &str) -> Handled {
    req(e, st, 0, json!({"v":1,"op":"sa.add","name":name,"spec":spec(spi, key)}))
}

fn policy(dir: &str, sa: &str) -> Value {
    json!({"v":1,"op":"policy.add","policy":{"dir":dir,"src":"192.168.1.0/24","dst":"192.168.2.0/24","action":"protect","bundle":[sa]}})
}

#[test]
fn bad_requests_get_errors_and_change_nothing() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let cases: &[(&[u8], &str)] = &[
        (b"{not json", "not JSON"),
        (b"[1,2]", "a request is a JSON object"),
        (br#"{"op":"sa.list"}"#, "missing `v`"),
        (br#"{"v":2,"op":"sa.list"}"#, "unsupported protocol version 2"),
        (br#"{"v":1}"#, "missing `op`"),
        (br#"{"v":1,"op":"sa.frob"}"#, "unknown op `sa.frob`"),
        (br#"{"v":1,"op":"sa.list","keyz":true}"#, "unknown field `keyz`"),
        (
            br#"{"v":1,"op":"sa.list","keys":"yes"}"#,
            "`keys` must be true or false",
        ),
        (br#"{"v":1,"op":"sa.del","name":"nope"}"#, "no SA named `nope`"),
        (br#"{"v":1,"op":"policy.del","index":0}"#, "`index` must be"),
        (br#"{"v":1,"op":"policy.del","index":3}"#, "no policy at index 3"),
        (
            br#"{"v":1,"op":"policy.add","policy":{"dir":"out","action":"protect","bundle":["x"]}}"#,
            "no SA named `x`",
        ),
        (b"\xff\xfe", "not JSON"),
    ];
    for (line, want) in cases {
        let h = handle(line, &mut e, &mut st, secs(0));
        let msg = err_of(&h);
        assert!(msg.contains(want), "{msg:?} should contain {want:?}");
        assert_eq!(h.response.to_json()["v"], 1);
    }
    assert!(e.sad().is_empty() && e.spd().policies().is_empty());
}

#[test]
fn sa_errors_are_the_config_files_and_never_show_keys() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    // A 16-byte key where GCM-128 needs 20 (key + salt): the config loader's message.
    let short = "0x00112233445566778899aabbccddeeff";
    let h = add(&mut e, &mut st, "a", 0x100, short);
    let msg = err_of(&h);
    assert!(msg.starts_with("SA `a`:"), "{msg}");
    assert!(msg.contains("key"), "{msg}");
    assert!(!msg.contains("00112233"), "key shown: {msg}");
    // The same SA in a config file gives the same message.
    let file = format!("[[sa]]\nname = \"a\"\nxfrm = \"{}\"\n", spec(0x100, short));
    let cfg = ipsec_config::from_toml::parse(&file).unwrap_err();
    assert_eq!(cfg.describe(), msg);
    // A key where the algorithm name belongs is not echoed either.
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"sa.add","name":"b","spec":"proto esp spi 1 enc 0xdeadbeefdeadbeef 0x00"}),
    );
    assert!(!err_of(&h).contains("deadbeef"));
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"sa.add","name":"c","spec":spec(0x101, KEY_OLD),"lifetime":{"soft":{"seconds":10},"hard":{"seconds":5}}}),
    );
    assert!(err_of(&h).contains("lifetime"));
    assert!(e.sad().is_empty());
}

#[test]
fn sa_add_refuses_spi_0_and_esn_without_a_window() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    // RFC 4303 2.1: SPI 0 MUST NOT be sent (in UDP it is RFC 3948's non-ESP marker).
    let msg = err_of(&add(&mut e, &mut st, "z", 0, KEY_OLD));
    assert!(msg.contains("SPI 0 is reserved"), "{msg}");
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"sa.add","name":"n","spec":format!("{} replay-window 0 flag esn", spec(0x10, KEY_OLD))}),
    );
    assert!(err_of(&h).contains("ESN needs a replay window"));
    assert!(e.sad().is_empty());
}

#[test]
fn sa_add_list_get_del_and_keys_only_when_asked() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let h = add(&mut e, &mut st, "ab", 0x1000, KEY_OLD);
    assert_eq!(ok_of(&h)["id"], 0);
    assert_eq!(h.events[0].to_json()["event"], "sa.added");
    assert_eq!(h.events[0].to_json()["spi"], "0x1000");
    assert!(err_of(&add(&mut e, &mut st, "ab", 0x1001, KEY_OLD)).contains("already named `ab`"));
    assert!(err_of(&add(&mut e, &mut st, "other", 0x1000, KEY_OLD)).contains("same protocol, SPI and destination"));
    let list = req(&mut e, &mut st, 0, json!({"v":1,"op":"sa.list"}));
    let text = list.response.to_string();
    assert!(!text.contains("0102030405"), "keys listed: {text}");
    let sa = &ok_of(&list)["sas"][0];
    assert_eq!(sa["name"], "ab");
    assert_eq!(sa["aead"]["alg"], "rfc4106(gcm(aes))");
    assert_eq!(sa["aead"]["key_bits"], 128);
    assert_eq!(sa["src"], "10.99.0.1");
    assert!(sa["spec"].as_str().unwrap().contains("<160-bit key>"));
    let get = req(&mut e, &mut st, 0, json!({"v":1,"op":"sa.get","name":"ab","keys":true}));
    let with = ok_of(&get)["sa"]["spec_with_keys"].as_str().unwrap().to_string();
    assert!(with.contains(KEY_OLD), "{with}");
    // What sa.get gives back is a SPEC that installs the same SA.
    assert_eq!(
        ipsec_config::spec::parse(&with).unwrap().params,
        e.sad().get(SaId(0)).unwrap().config.params
    );
    let del = req(&mut e, &mut st, 0, json!({"v":1,"op":"sa.del","name":"ab"}));
    assert_eq!(del.events[0].to_json()["event"], "sa.removed");
    assert_eq!(
        ok_of(&req(&mut e, &mut st, 0, json!({"v":1,"op":"sa.list"})))["sas"],
        json!([])
    );
    // Its SPI is free again.
    ok_of(&add(&mut e, &mut st, "ab", 0x1000, KEY_OLD));
}

#[test]
fn policies_are_added_listed_and_deleted_by_index() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    ok_of(&add(&mut e, &mut st, "ab", 0x1000, KEY_OLD));
    let h = req(&mut e, &mut st, 0, policy("out", "ab"));
    assert_eq!(ok_of(&h)["index"], 1);
    assert_eq!(h.events[0].to_json()["event"], "policy.added");
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"policy.add","policy":{"dir":"in","proto":"tcp","dst_port":"22","action":"bypass"}}),
    );
    assert_eq!(ok_of(&h)["index"], 2);
    // The config file's checks and messages.
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"policy.add","policy":{"dir":"out","dst_port":"22","action":"bypass"}}),
    );
    assert!(err_of(&h).contains("ports need proto"), "{}", h.response);
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"policy.add","policy":{"dir":"sideways","action":"bypass"}}),
    );
    err_of(&h);
    let list = req(&mut e, &mut st, 0, json!({"v":1,"op":"policy.list"}));
    let ps = &ok_of(&list)["policies"];
    assert_eq!(ps[0]["bundle"], json!(["ab"]));
    assert_eq!(ps[0]["src"], "192.168.1.0/24");
    assert_eq!(ps[1]["proto"], "tcp");
    assert_eq!(ps[1]["dst_port"], "22");
    let h = req(&mut e, &mut st, 0, json!({"v":1,"op":"policy.del","index":1}));
    assert_eq!(ok_of(&h)["policy"]["action"], "protect");
    assert_eq!(h.events[0].to_json()["event"], "policy.removed");
    assert_eq!(e.spd().policies().len(), 1);
    assert_eq!(e.spd().policies()[0].action, Action::Bypass);
}

/// A sender engine and a receiver engine, both driven over the protocol.
fn pair() -> [(Engine, Registry); 2] {
    let mut a = (Engine::new(), Registry::default());
    let mut b = (Engine::new(), Registry::default());
    ok_of(&add(&mut a.0, &mut a.1, "ab", 0x1000, KEY_OLD));
    ok_of(&req(&mut a.0, &mut a.1, 0, policy("out", "ab")));
    ok_of(&add(&mut b.0, &mut b.1, "ab", 0x1000, KEY_OLD));
    ok_of(&req(&mut b.0, &mut b.1, 0, policy("in", "ab")));
    [a, b]
}

fn udp_packet() -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4([192, 168, 1, 1], [192, 168, 2, 1], 64)
        .udp(1000, 2000)
        .write(&mut out, &[7u8; 100])
        .unwrap();
    out
}

fn seal(e: &mut Engine, now: u64) -> Vec<u8> {
    let mut raw = vec![0u8; 2048];
    let p = udp_packet();
    raw[256..256 + p.len()].copy_from_slice(&p);
    let mut buf = ipsec_core::PacketBuf::new(&mut raw, 256, p.len()).unwrap();
    assert_eq!(e.outbound(&mut buf, secs(now)), Ok(Verdict::Protected(1)));
    buf.packet().to_vec()
}

fn open(e: &Engine, w: &mut Worker, wire: &[u8], now: u64) -> Result<Verdict, ipsec_engine::Dropped> {
    let mut raw = vec![0u8; 2048];
    raw[256..256 + wire.len()].copy_from_slice(wire);
    let mut buf = ipsec_core::PacketBuf::new(&mut raw, 256, wire.len()).unwrap();
    e.data_plane().inbound(w, &mut buf, secs(now))
}

#[test]
fn update_is_make_before_break_and_retires_the_old_sa_when_idle() {
    let [(mut a, mut sa), (mut b, mut sb)] = pair();
    let mut w = Worker::new().unwrap();
    let in_flight = seal(&mut a, 1);
    // The receiver rekeys first (new inbound SA), then the sender.
    let upd = |spi, key| json!({"v":1,"op":"sa.update","name":"ab","spec":spec(spi, key)});
    let h = req(&mut b, &mut sb, 1, upd(0x2000, KEY_NEW));
    assert_eq!(ok_of(&h)["old_id"], 0);
    assert_eq!(h.events[0].to_json()["event"], "sa.replaced");
    assert_eq!(h.events[0].to_json()["spi"], "0x2000");
    // Old-SA packets still arrive during the switch: accepted.
    assert_eq!(open(&b, &mut w, &in_flight, 1), Ok(Verdict::Protected(1)));
    let before_switch = seal(&mut a, 2);
    ok_of(&req(&mut a, &mut sa, 2, upd(0x2000, KEY_NEW)));
    let after_switch = seal(&mut a, 2);
    assert_eq!(u32::from_be_bytes(after_switch[20..24].try_into().unwrap()), 0x2000);
    assert_eq!(open(&b, &mut w, &before_switch, 2), Ok(Verdict::Protected(1)));
    assert_eq!(open(&b, &mut w, &after_switch, 2), Ok(Verdict::Protected(1)));
    // show lists both, the old one as retiring.
    let show = req(&mut b, &mut sb, 2, json!({"v":1,"op":"show"}));
    let sas = ok_of(&show)["sas"].as_array().unwrap().clone();
    assert_eq!(sas.len(), 2);
    assert_eq!(sas[0]["retiring"], true);
    assert_eq!(sas[0]["inbound"]["packets"], 2);
    assert_eq!(sas[1]["retiring"], false);
    assert_eq!(sas[1]["replay_top"], 1);
    assert_eq!(sas[1]["inbound"]["drops"]["bad_icv"], 0);
    // Ticks see the old SA used, then idle, but not for long enough: kept.
    assert!(after_tick(&mut b, &mut sb, &[], secs(2), &mut Vec::new()).is_empty());
    assert!(after_tick(&mut b, &mut sb, &[], secs(2) + RETIRE_IDLE / 2, &mut Vec::new()).is_empty());
    let ev = after_tick(&mut b, &mut sb, &[], secs(2) + RETIRE_IDLE, &mut Vec::new());
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].to_json()["event"], "sa.retired");
    assert_eq!(ev[0].to_json()["why"], "idle");
    assert!(sb.retiring().is_empty());
    // Now an old-SA packet finds no SA.
    assert_eq!(
        open(&b, &mut w, &before_switch, 9).unwrap_err().reason,
        DropReason::NoSa
    );
}

#[test]
fn expiry_events_are_named() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let h = req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"sa.add","name":"x","spec":spec(0x10, KEY_OLD),"lifetime":{"soft":{"seconds":5},"hard":{"seconds":9}}}),
    );
    ok_of(&h);
    e.poll(secs(6));
    let evs: Vec<ipsec_engine::Event> = std::iter::from_fn(|| e.next_event()).collect();
    let out = after_tick(&mut e, &mut st, &evs, secs(6), &mut Vec::new());
    assert_eq!(out[0].to_json()["event"], "sa.soft_expired");
    assert_eq!(out[0].to_json()["sa"], "x");
    assert_eq!(out[0].to_json()["limit"], "seconds");
    let show = req(&mut e, &mut st, 6, json!({"v":1,"op":"show"}));
    assert_eq!(ok_of(&show)["sas"][0]["lifetime_left"]["hard"]["seconds"], 3);
}

#[test]
fn request_lines_are_bounded_in_length_and_time() {
    let never = AtomicBool::new(false);
    let soon = || Instant::now() + secs(5);
    let (mut a, mut b) = UnixStream::pair().unwrap();
    b.write_all(b"abc\ndef\nxyz").unwrap();
    drop(b);
    let mut r = RequestReader::new(16);
    assert_eq!(&**r.next(&mut a, soon(), &never).unwrap().unwrap(), b"abc");
    assert_eq!(&**r.next(&mut a, soon(), &never).unwrap().unwrap(), b"def");
    assert_eq!(&**r.next(&mut a, soon(), &never).unwrap().unwrap(), b"xyz");
    assert!(r.next(&mut a, soon(), &never).unwrap().is_none());
    // Too long, with or without a newline at the end.
    for tail in [&b""[..], b"\n"] {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&[b'x'; 100]).unwrap();
        b.write_all(tail).unwrap();
        let e = RequestReader::new(16).next(&mut a, soon(), &never).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
    // The deadline is for the whole line: bytes trickling in do not extend it.
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let t0 = Instant::now();
    let (e, took) = thread::scope(|s| {
        s.spawn(move || {
            for _ in 0..20 {
                if b.write_all(b"x").is_err() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        let e = RequestReader::new(1000).next(&mut a, t0 + Duration::from_millis(300), &never);
        (e.unwrap_err(), t0.elapsed())
    });
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(took < Duration::from_millis(600), "{took:?}");
    // A stop is seen within POLL.
    let (mut a, _b) = UnixStream::pair().unwrap();
    let stop = AtomicBool::new(true);
    let t0 = Instant::now();
    let e = RequestReader::new(16).next(&mut a, soon(), &stop).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Interrupted);
    assert!(t0.elapsed() < secs(1));
}

#[test]
fn hook_runs_with_the_event_and_is_killed_when_slow() {
    let dir = std::env::temp_dir().join(format!("ctl-hook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("ev.json");
    let st = run_bounded(&format!("cat > {}", out.display()), b"{\"event\":\"x\"}", secs(5)).unwrap();
    assert!(st.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"event\":\"x\"}");
    let t0 = Instant::now();
    assert!(run_bounded("sleep 30", b"", Duration::from_millis(200)).is_none());
    assert!(t0.elapsed() < secs(5));
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- through a real Unix socket ---------------------------------------------------------

fn client(path: &Path) -> (BufReader<UnixStream>, UnixStream) {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(secs(5))).unwrap();
    (BufReader::new(s.try_clone().unwrap()), s)
}

fn call(c: &mut (BufReader<UnixStream>, UnixStream), line: &str) -> Value {
    writeln!(c.1, "{line}").unwrap();
    let mut resp = String::new();
    c.0.read_line(&mut resp).unwrap();
    serde_json::from_str(&resp).unwrap()
}

#[test]
fn socket_serves_requests_monitors_and_survives_bad_clients() {
    let dir = std::env::temp_dir().join(format!("ctl-sock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tunneld.sock");
    let sock = ControlSocket::bind(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    // A second daemon on the same path is refused; a non-socket file is not replaced.
    assert!(ControlSocket::bind(&path).is_err());
    std::fs::write(dir.join("file"), b"x").unwrap();
    assert!(ControlSocket::bind(&dir.join("file")).is_err());
    let t = Tunnel::new(Engine::new(), vec![Ipv4Addr::new(10, 99, 0, 2).into()]);
    let c = Control::new(&t.engine(), None);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| sock.serve(&t, &c, &stop));
        // A client that sends an endless line is cut off; the socket keeps serving.
        {
            let mut bad = UnixStream::connect(&path).unwrap();
            let _ = bad.write_all(&vec![b'x'; MAX_REQUEST + 10]);
            let mut resp = String::new();
            let _ = BufReader::new(bad).read_line(&mut resp);
            assert!(resp.contains("request longer than"), "{resp}");
        }
        let mut mon = client(&path);
        assert_eq!(call(&mut mon, r#"{"v":1,"op":"monitor"}"#)["ok"], true);
        let mut cl = client(&path);
        let add = json!({"v":1,"op":"sa.add","name":"ab","spec":spec(0x1000, KEY_OLD)}).to_string();
        assert_eq!(call(&mut cl, &add)["ok"], true);
        assert_eq!(call(&mut cl, "garbage")["ok"], false);
        let pol = policy("out", "ab").to_string();
        assert_eq!(call(&mut cl, &pol)["index"], 1);
        let list = call(&mut cl, r#"{"v":1,"op":"sa.list"}"#);
        assert_eq!(list["sas"][0]["name"], "ab");
        drop(cl);
        // The monitor saw both changes, in order.
        let mut line = String::new();
        mon.0.read_line(&mut line).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["event"], "sa.added");
        line.clear();
        mon.0.read_line(&mut line).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap()["event"], "policy.added");
        stop.store(true, Ordering::Relaxed);
    });
    // The packet path uses what the socket installed.
    assert_eq!(crate::dataplane::inbound_protocols(&t.engine()), Vec::<u8>::new());
    assert_eq!(t.engine().spd().policies().len(), 1);
    drop(sock);
    assert!(!path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn updates_in_a_row_each_switch_outbound() {
    let [(mut a, mut sa), _] = pair();
    for (i, key) in [KEY_NEW, KEY_OLD, KEY_NEW].iter().enumerate() {
        let spi = 0x2000 + i as u32;
        let h = req(
            &mut a,
            &mut sa,
            1,
            json!({"v":1,"op":"sa.update","name":"ab","spec":spec(spi, key)}),
        );
        ok_of(&h);
        let wire = seal(&mut a, 1);
        assert_eq!(u32::from_be_bytes(wire[20..24].try_into().unwrap()), spi, "update {i}");
    }
}

#[test]
fn an_sas_encap_is_listed_and_given_back_in_its_spec() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let with_encap = format!("{} encap espinudp 4500 4501 10.0.0.7", spec(0x1000, KEY_OLD));
    ok_of(&req(
        &mut e,
        &mut st,
        0,
        json!({"v":1,"op":"sa.add","name":"ab","spec":with_encap}),
    ));
    let get = req(&mut e, &mut st, 0, json!({"v":1,"op":"sa.get","name":"ab","keys":true}));
    let sa = &ok_of(&get)["sa"];
    assert_eq!(sa["encap"], json!({"sport": 4500, "dport": 4501, "oa": "10.0.0.7"}));
    assert!(
        sa["spec"]
            .as_str()
            .unwrap()
            .ends_with(" encap espinudp 4500 4501 10.0.0.7"),
        "{sa}"
    );
    let back = ipsec_config::spec::parse(sa["spec_with_keys"].as_str().unwrap()).unwrap();
    assert_eq!(back.encap, e.sad().get(SaId(0)).unwrap().config.encap);
    assert!(back.encap.is_some());
    // Without encap, no `encap` field and no words.
    ok_of(&add(&mut e, &mut st, "cd", 0x1001, KEY_OLD));
    let get = req(&mut e, &mut st, 0, json!({"v":1,"op":"sa.get","name":"cd"}));
    let sa = &ok_of(&get)["sa"];
    assert!(
        sa.get("encap").is_none() && !sa["spec"].as_str().unwrap().contains("encap"),
        "{sa}"
    );
}

/// A control socket on a fresh path in a temporary directory, with a tunnel core.
struct Served {
    dir: PathBuf,
    path: PathBuf,
    sock: ControlSocket,
    t: Tunnel,
    c: Control,
}

fn served(tag: &str) -> Served {
    let dir = std::env::temp_dir().join(format!("ctl-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tunneld.sock");
    let sock = ControlSocket::bind(&path).unwrap();
    let t = Tunnel::new(Engine::new(), vec![Ipv4Addr::new(10, 99, 0, 2).into()]);
    let c = Control::new(&t.engine(), None);
    Served { dir, path, sock, t, c }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads one response line; `None` at end of stream or on an error.
fn response(r: &mut BufReader<UnixStream>) -> Option<Value> {
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(n) if n > 0 => serde_json::from_str(&line).ok(),
        _ => None,
    }
}

/// Issue #22 defect 1: a client that sends part of a request and then a byte every now and
/// then, never a newline, held the socket (its deadline was checked only between lines):
/// other clients waited, and so did the daemon's stop. Now every client has its own thread
/// and a deadline for each whole request.
#[test]
fn a_slow_client_delays_no_other_client_and_not_the_stop() {
    let sv = served("slow");
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let serve = s.spawn(|| sv.sock.serve(&sv.t, &sv.c, &stop));
        // Two trickling clients: part of a request, then a byte every 300 ms.
        let trickle = |path: &Path| {
            let mut w = UnixStream::connect(path).unwrap();
            w.write_all(br#"{"v":1,"op":"sa.li"#).unwrap();
            w
        };
        let mut slow = vec![trickle(&sv.path), trickle(&sv.path)];
        let t0 = Instant::now();
        // Meanwhile other clients are answered at once, many times over.
        let mut fast_worst = Duration::ZERO;
        let mut cut_off = None;
        while t0.elapsed() < CLIENT_IDLE + secs(1) {
            for w in &mut slow {
                if w.write_all(b" ").is_err() && cut_off.is_none() {
                    cut_off = Some(t0.elapsed());
                }
            }
            let asked = Instant::now();
            let mut cl = client(&sv.path);
            assert_eq!(call(&mut cl, r#"{"v":1,"op":"sa.list"}"#)["ok"], true);
            fast_worst = fast_worst.max(asked.elapsed());
            thread::sleep(Duration::from_millis(300));
        }
        assert!(fast_worst < secs(1), "a client waited {fast_worst:?} behind a slow one");
        // The slow ones were told why and closed at their deadline, not later.
        for w in slow.drain(..) {
            let mut r = BufReader::new(w);
            let v = response(&mut r).expect("an error line before the close");
            assert!(v["error"].as_str().unwrap().contains("no whole request in time"), "{v}");
            assert!(response(&mut r).is_none());
        }
        assert!(
            cut_off.is_none_or(|c| c < CLIENT_IDLE + secs(1)),
            "cut off after {cut_off:?}"
        );
        // A stop is not held by a client in the middle of a request.
        let _hold = trickle(&sv.path);
        thread::sleep(Duration::from_millis(200));
        let t1 = Instant::now();
        stop.store(true, Ordering::Relaxed);
        serve.join().unwrap();
        assert!(
            t1.elapsed() < Duration::from_millis(500),
            "stop took {:?}",
            t1.elapsed()
        );
    });
}

/// Up to MAX_CLIENTS idle clients are served at once, each for at most CLIENT_IDLE; one
/// more is answered `busy` at once (not queued behind them), and the slots come back.
#[test]
fn idle_clients_are_bounded_and_never_queue_the_others() {
    let sv = served("idle");
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| sv.sock.serve(&sv.t, &sv.c, &stop));
        let idle: Vec<UnixStream> = (0..MAX_CLIENTS)
            .map(|_| UnixStream::connect(&sv.path).unwrap())
            .collect();
        thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        let mut extra = client(&sv.path);
        writeln!(extra.1, r#"{{"v":1,"op":"sa.list"}}"#).unwrap();
        let v = response(&mut extra.0).unwrap();
        assert!(v["error"].as_str().unwrap().starts_with("busy"), "{v}");
        assert!(t0.elapsed() < secs(1));
        // The idle ones are closed after CLIENT_IDLE; then there is room again.
        thread::sleep(CLIENT_IDLE + Duration::from_millis(500));
        let mut cl = client(&sv.path);
        assert_eq!(call(&mut cl, r#"{"v":1,"op":"sa.list"}"#)["ok"], true);
        drop(idle);
        stop.store(true, Ordering::Relaxed);
    });
}

/// Issue #22 defect 2: monitors that disconnected with no event between used up the slots
/// (the 17th was answered ok and closed). Now hung-up monitors are dropped before a new one
/// is counted; with every slot really in use, the next is refused with an error, not `ok`.
#[test]
fn monitor_slots_come_back_when_monitors_leave() {
    let sv = served("mon");
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| sv.sock.serve(&sv.t, &sv.c, &stop));
        for _ in 0..3 * MAX_MONITORS {
            let mut m = client(&sv.path);
            assert_eq!(call(&mut m, r#"{"v":1,"op":"monitor"}"#)["ok"], true);
        }
        // This one is a monitor and gets events.
        let mut m = client(&sv.path);
        assert_eq!(call(&mut m, r#"{"v":1,"op":"monitor"}"#)["ok"], true);
        let mut cl = client(&sv.path);
        let add = json!({"v":1,"op":"sa.add","name":"ab","spec":spec(0x1000, KEY_OLD)}).to_string();
        assert_eq!(call(&mut cl, &add)["ok"], true);
        assert_eq!(response(&mut m.0).unwrap()["event"], "sa.added");
        // All slots in use: refused with a reason.
        let mut held: Vec<_> = (1..MAX_MONITORS).map(|_| client(&sv.path)).collect();
        for h in &mut held {
            assert_eq!(call(h, r#"{"v":1,"op":"monitor"}"#)["ok"], true);
        }
        let mut no = client(&sv.path);
        let v = call(&mut no, r#"{"v":1,"op":"monitor"}"#);
        assert_eq!(v["ok"], false, "{v}");
        assert!(v["error"].as_str().unwrap().contains("too many monitors"), "{v}");
        // One leaves: its slot is free for the next.
        drop(held.pop());
        thread::sleep(Duration::from_millis(100));
        let mut again = client(&sv.path);
        assert_eq!(call(&mut again, r#"{"v":1,"op":"monitor"}"#)["ok"], true);
        assert_eq!(sv.c.monitor_count(), MAX_MONITORS);
        stop.store(true, Ordering::Relaxed);
    });
}

/// A monitor that does not read is dropped when its buffer fills; the requests raising the
/// events are not slowed by it.
#[test]
fn a_monitor_that_does_not_read_slows_nobody() {
    let sv = served("deaf");
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| sv.sock.serve(&sv.t, &sv.c, &stop));
        let mut deaf = client(&sv.path);
        assert_eq!(call(&mut deaf, r#"{"v":1,"op":"monitor"}"#)["ok"], true);
        let mut cl = client(&sv.path);
        let t0 = Instant::now();
        for i in 0..400u32 {
            let add = json!({"v":1,"op":"sa.add","name":format!("s{i}"),"spec":spec(0x1000 + i, KEY_OLD)}).to_string();
            assert_eq!(call(&mut cl, &add)["ok"], true);
            let del = json!({"v":1,"op":"sa.del","name":format!("s{i}")}).to_string();
            assert_eq!(call(&mut cl, &del)["ok"], true);
            if i % 50 == 49 {
                cl = client(&sv.path); // within CLIENT_MAX
            }
        }
        assert!(t0.elapsed() < secs(20), "{:?}", t0.elapsed());
        assert_eq!(sv.c.monitor_count(), 0, "the deaf monitor is dropped");
        // What it got is whole lines up to where it was dropped.
        deaf.1.shutdown(std::net::Shutdown::Write).unwrap();
        let mut n = 0;
        while let Some(v) = response(&mut deaf.0) {
            assert!(v["event"].is_string());
            n += 1;
        }
        assert!(n > 100, "{n}");
        stop.store(true, Ordering::Relaxed);
    });
}

/// Retired SAs are freed (issue #22): 2,000 `sa.update`s, each old SA retired when idle,
/// leave one SA in the SAD, a `show` and a snapshot the size they were after the first
/// hundred, and every packet opened counted (live SA + retired total).
#[test]
fn rekeys_over_the_socket_leave_no_sa_behind() {
    let [(mut a, mut sa), (mut b, mut sb)] = pair();
    let mut w = Worker::new().unwrap();
    let mut sizes = Vec::new();
    const N: u32 = 2000;
    for g in 1..=N {
        let now = u64::from(g) * (RETIRE_IDLE.as_secs() + 1);
        let upd = json!({"v":1,"op":"sa.update","name":"ab","spec":spec(0x2000 + g, if g % 2 == 0 { KEY_OLD } else { KEY_NEW })});
        ok_of(&req(&mut b, &mut sb, now, upd.clone()));
        ok_of(&req(&mut a, &mut sa, now, upd));
        let wire = seal(&mut a, now);
        assert_eq!(open(&b, &mut w, &wire, now), Ok(Verdict::Protected(1)));
        // One tick later the old SA has been idle for RETIRE_IDLE: retired and freed.
        let later = Duration::from_secs(now + RETIRE_IDLE.as_secs());
        for (e, st) in [(&mut a, &mut sa), (&mut b, &mut sb)] {
            e.poll(later);
            let ev = after_tick(e, st, &[], later, &mut Vec::new());
            assert_eq!(ev.len(), 1, "{ev:?}");
            assert_eq!(ev[0].to_json()["event"], "sa.retired");
            let old = if g == 1 { 0x1000 } else { 0x2000 + g - 1 };
            assert_eq!(ev[0].to_json()["spi"], format!("{old:#x}"));
        }
        if g == 100 || g == N {
            let show = req(&mut b, &mut sb, now, json!({"v":1,"op":"show"}))
                .response
                .to_string();
            let snap = serde_json::to_string(&b.snapshot(later)).unwrap();
            sizes.push((show.len(), snap.len()));
        }
    }
    assert_eq!((a.sad().len(), b.sad().len()), (1, 1));
    let (s100, sn) = (sizes[0], sizes[1]);
    assert!(sn.0 <= s100.0 + 32 && sn.1 <= s100.1 + 32, "{s100:?} -> {sn:?}");
    let snap = b.snapshot(secs(0));
    assert_eq!(snap.retired.sas, u64::from(N));
    assert_eq!(snap.retired.inbound.packets + snap.sas[0].inbound.packets, u64::from(N));
}

fn ike_child(spi_out: u32, spi_in: u32) -> ChildSas {
    let sa = |dir: &str, spi: u32| {
        sa_config(&SaRequest {
            name: format!("ike:c/c/{dir}-{spi:08x}"),
            spec: Zeroizing::new(spec(spi, KEY_OLD)),
            lifetime: None,
        })
        .unwrap()
    };
    let p = |a: [u8; 4]| ipsec_engine::Prefix::new(Ipv4Addr::from(a).into(), 24);
    let sel = |s, d| ipsec_engine::Selector {
        src: p(s),
        dst: p(d),
        ..Default::default()
    };
    ChildSas {
        out: sa("out", spi_out),
        inb: sa("in", spi_in),
        selectors: vec![(
            sel([192, 168, 1, 0], [192, 168, 2, 0]),
            sel([192, 168, 2, 0], [192, 168, 1, 0]),
        )],
        before: None,
    }
}

/// A rekey we made puts the new pair's policies before the old pair's (outbound traffic
/// moves at once); the peer's rekey puts them after (traffic stays on the old pair until
/// the peer deletes it), RFC 7296 2.8.
#[test]
fn a_rekeyed_childs_policies_go_before_the_old_ones_only_for_our_rekey() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let mut events = Vec::new();
    install_child(&mut e, &mut st, ike_child(0x100, 0x200), secs(1), &mut events).unwrap();
    let protects = |e: &Engine, i: usize| match &e.spd().policies()[i].action {
        Action::Protect(v) => v[0],
        other => panic!("{other:?}"),
    };
    // The peer's rekey: after.
    install_child(&mut e, &mut st, ike_child(0x101, 0x201), secs(2), &mut events).unwrap();
    assert_eq!(protects(&e, 0), st.id("ike:c/c/out-00000100").unwrap());
    // Ours, replacing 0x101: before it, after 0x100's.
    let mut c = ike_child(0x102, 0x202);
    c.before = Some(0x201);
    install_child(&mut e, &mut st, c, secs(3), &mut events).unwrap();
    let order: Vec<_> = (0..6).map(|i| protects(&e, i)).collect();
    let id = |n: &str| st.id(n).unwrap();
    assert_eq!(
        order,
        [
            id("ike:c/c/out-00000100"),
            id("ike:c/c/in-00000200"),
            id("ike:c/c/out-00000102"),
            id("ike:c/c/in-00000202"),
            id("ike:c/c/out-00000101"),
            id("ike:c/c/in-00000201"),
        ]
    );
}

#[test]
fn an_ike_child_is_installed_whole_or_not_at_all() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    ok_of(&add(&mut e, &mut st, "manual", 0x300, KEY_OLD));
    let mut events = Vec::new();
    install_child(&mut e, &mut st, ike_child(0x100, 0x200), secs(1), &mut events).unwrap();
    assert_eq!(e.sad().len(), 3);
    assert_eq!(e.spd().policies().len(), 2);
    let kinds: Vec<&str> = events.iter().map(|v| v.kind()).collect();
    assert_eq!(
        kinds,
        ["sa.added", "sa.added", "policy.added", "policy.added"],
        "{events:?}"
    );
    // The inbound SA's SPI is taken (by the manual SA): the outbound one, added first, goes
    // again, nothing else changes and no event tells of a half-installed child.
    let mut events = Vec::new();
    let err = install_child(&mut e, &mut st, ike_child(0x101, 0x300), secs(2), &mut events).unwrap_err();
    assert!(!err.is_empty());
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(e.sad().len(), 3);
    assert_eq!(e.spd().policies().len(), 2);
    assert!(st.id("ike:c/c/out-00000101").is_none());
    assert!(st.id("ike:c/c/out-00000100").is_some() && st.id("manual").is_some());
}

/// An IKE child's soft limit or sequence warning asks IKE to rekey that pair; another SA's
/// does not.
#[test]
fn an_ike_childs_soft_limit_asks_for_its_rekey() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let mut events = Vec::new();
    ok_of(&add(&mut e, &mut st, "manual", 0x300, KEY_OLD));
    install_child(&mut e, &mut st, ike_child(0x100, 0x200), secs(1), &mut events).unwrap();
    let out = st.child(ChildSaKey::out(0x200)).unwrap();
    let inb = st.child(ChildSaKey::inb(0x200)).unwrap();
    let manual = st.id("manual").unwrap();
    assert_eq!(ike_rekeys(&st, &[KeyEvent::Soft(out)]), [0x200]);
    assert_eq!(
        ike_rekeys(&st, &[KeyEvent::SeqRunningOut(inb), KeyEvent::Soft(out)]),
        [0x200]
    );
    assert!(ike_rekeys(&st, &[KeyEvent::Soft(manual)]).is_empty());
    assert!(ike_rekeys(&st, &[KeyEvent::Hard(out)]).is_empty());
    assert_eq!(st.owner(manual), Some(Owner::Socket));
    // The engine's soft expiry reaches the key manager as a typed event.
    let mut keys = Vec::new();
    let lines = after_tick(
        &mut e,
        &mut st,
        &[ipsec_engine::Event::SoftExpired {
            sa: out,
            limit: Limit::Seconds,
        }],
        secs(2),
        &mut keys,
    );
    assert_eq!(lines[0].to_json()["event"], "sa.soft_expired");
    assert_eq!(keys, [KeyEvent::Soft(out)]);
}

/// A replaced IKE pair's inbound SA is retired, not removed: it loses its name and policies,
/// stays in the SAD for the packets in flight, and goes once idle for RETIRE_IDLE.
#[test]
fn a_replaced_ike_inbound_sa_is_retired_then_removed_when_idle() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    let mut events = Vec::new();
    install_child(&mut e, &mut st, ike_child(0x100, 0x200), secs(1), &mut events).unwrap();
    install_child(&mut e, &mut st, ike_child(0x101, 0x201), secs(2), &mut events).unwrap();
    let old_in = st.id("ike:c/c/in-00000200").unwrap();
    let mut events = Vec::new();
    retire_ike_sa(&mut e, &mut st, ChildSaKey::inb(0x200), secs(3), &mut events);
    assert_eq!(events[0].to_json()["event"], "sa.retiring");
    assert!(e.sad().get(old_in).is_some(), "kept for packets in flight");
    assert!(st.id("ike:c/c/in-00000200").is_none());
    assert_eq!(st.owner(old_in), None);
    assert_eq!(e.spd().policies().len(), 3, "the old inbound policy went");
    assert!(after_tick(&mut e, &mut st, &[], secs(3) + RETIRE_IDLE / 2, &mut Vec::new()).is_empty());
    let ev = after_tick(&mut e, &mut st, &[], secs(3) + RETIRE_IDLE, &mut Vec::new());
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].to_json()["event"], "sa.retired");
    assert!(e.sad().get(old_in).is_none() || e.sad().get(old_in).unwrap().state() == SaState::Removed);
}

/// Issue #39 (1): two road warriors on one `%any` connection may pick the same SPI for the
/// SA we seal toward them (each receiver picks its own, RFC 4301 4.1). B's child must
/// install beside A's, and when B's goes, A's SAs and policies stay: SAs are joined by the
/// pair's inbound SPI (ours, unique), never by their `ike:CONN/CHILD/out-SPI` label. Before
/// the registry, B's install was refused ("another SA is already named") and the Delete
/// that followed removed A's outbound SA and policy by that name.
#[test]
fn two_road_warriors_with_the_same_outbound_spi_do_not_touch_each_other() {
    let t = Tunnel::new(Engine::new(), vec![]);
    let control = Control::new(&t.engine(), None);
    let child = |spi_in: u32, peer: &str, net: u8| {
        let mut c = ike_child(0x4242, spi_in);
        for sa in [&mut c.out, &mut c.inb] {
            let spec = format!(
                "proto esp spi {:#x} mode tunnel src 10.99.0.1 dst {peer} aead 'rfc4106(gcm(aes))' {KEY_OLD} 128",
                sa.params.spi
            );
            let r = SaRequest {
                name: sa.name.clone(),
                spec: Zeroizing::new(spec),
                lifetime: None,
            };
            *sa = sa_config(&r).unwrap();
        }
        let p = |a: [u8; 4]| ipsec_engine::Prefix::new(Ipv4Addr::from(a).into(), 32);
        let sel = |s, d| ipsec_engine::Selector {
            src: p(s),
            dst: p(d),
            ..Default::default()
        };
        c.selectors = vec![(
            sel([192, 168, 1, 1], [10, 10, 0, net]),
            sel([10, 10, 0, net], [192, 168, 1, 1]),
        )];
        c
    };
    control.ike_install(&t, child(0xa000_0001, "10.99.0.2", 2)).unwrap();
    {
        let st = control.state();
        let a_out = st.child(ChildSaKey::out(0xa000_0001)).unwrap();
        assert_eq!(st.label(a_out), Some("ike:c/c/out-00004242"));
    }
    control
        .ike_install(&t, child(0xb000_0001, "10.99.0.3", 3))
        .expect("B's child installs beside A's: the same outbound SPI toward another peer");
    {
        let eng = t.engine();
        assert_eq!((eng.sad().len(), eng.spd().policies().len()), (4, 4));
    }
    // The label is shared, so it finds neither.
    assert_eq!(control.state().id("ike:c/c/out-00004242"), None);
    let a_out = control.state().child(ChildSaKey::out(0xa000_0001)).unwrap();
    // B goes (its Delete, or a failed install's clean-up): A keeps its SAs and policies.
    control.ike_remove(&t, &[ChildSaKey::out(0xb000_0001), ChildSaKey::inb(0xb000_0001)]);
    let eng = t.engine();
    assert_eq!((eng.sad().len(), eng.spd().policies().len()), (2, 2));
    assert!(eng.sad().get(a_out).is_some(), "A's outbound SA is still there");
    assert!(eng
        .spd()
        .policies()
        .iter()
        .any(|p| matches!(&p.action, Action::Protect(v) if v == &[a_out])));
    drop(eng);
    assert_eq!(control.state().id("ike:c/c/out-00004242"), Some(a_out));
}

/// `ipsec ike list`'s bytes of a child: its outbound SA's and inbound SA's data-plane counts,
/// found by the child's inbound SPI; a child the engine has not got stays null (#36).
#[test]
fn ike_list_children_carry_the_data_planes_bytes() {
    let mut e = Engine::new();
    let mut st = Registry::default();
    install_child(&mut e, &mut st, ike_child(0x100, 0x200), secs(1), &mut Vec::new()).unwrap();
    let sealed = seal(&mut e, 2);
    let child = |spi_in: &str| {
        json!({"child": "net", "state": "installed", "spi_in": spi_in, "spi_out": "00000100",
            "proposal": "aes128gcm16-noesn", "rekeys": null, "rekey_in_seconds": null,
            "expires_in_seconds": null})
    };
    let v = json!({"ike_sas": [{
        "conn": "rw", "state": "established", "role": "responder", "spi_i": "0123456789abcdef",
        "spi_r": "fedcba9876543210", "local": "10.0.0.1:4500", "remote": "10.0.0.2:4500",
        "local_id": null, "remote_id": "alice", "nat": true, "proposal": null,
        "message_ids": {"next_request": 0, "peer_next": 2}, "age_seconds": 5, "rekey_in_seconds": null,
        "counters": {}, "children": [child("00000200"), child("00000999")]
    }]});
    let mut list: response::IkeList = serde_json::from_value(v).unwrap();
    assert_eq!(
        list.ike_sas[0].children[0].bytes_out, None,
        "an older tunneld's line reads"
    );
    views::ike_child_bytes(&mut list.ike_sas, &e, &st);
    let c = &list.ike_sas[0].children;
    let out = e
        .sad()
        .get(st.child(ChildSaKey::out(0x200)).unwrap())
        .unwrap()
        .usage()
        .bytes;
    assert!(out > 0 && out <= sealed.len() as u64, "{out}");
    assert_eq!((c[0].bytes_out, c[0].bytes_in), (Some(out), Some(0)));
    assert_eq!((c[1].bytes_out, c[1].bytes_in), (None, None));
}
