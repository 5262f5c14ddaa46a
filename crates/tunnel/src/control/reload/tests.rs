//! The reload diff, its application to a running engine, and a reload on two tunnel cores
//! while packets flow between them over in-memory devices.

use super::*;
use crate::dataplane::{run_inbound, run_outbound, TunIo, UnderlayRx, UnderlayTx};
use serde_json::json;
use std::collections::VecDeque;

const KEY1: &str = "0x0102030405060708090a0b0c0d0e0f1011121314";
const KEY2: &str = "0xa1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4";
const AH_H: &str = "[[sa]]\nname = \"h\"\nxfrm = \"proto ah spi 0x40 mode transport src 10.99.0.1 dst 10.99.0.2 auth 'hmac(sha256)' 0x0102030405060708090a0b0c0d0e0f100102030405060708090a0b0c0d0e0f10\"\n";
const KEY3: &str = "0xc1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4";

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// One `[[sa]]` table: ESP tunnel 10.99.0.1 -> 10.99.0.2, AES-GCM-128.
fn sa(name: &str, spi: u32, key: &str) -> String {
    format!(
        "[[sa]]\nname = \"{name}\"\nxfrm = \"proto esp spi {spi:#x} mode tunnel src 10.99.0.1 dst 10.99.0.2 aead 'rfc4106(gcm(aes))' {key} 128\"\n"
    )
}

/// One `[[policy]]` table: 192.168.1.0/24 -> 192.168.`net`.0/24 protected by `bundle`.
fn pol(dir: &str, net: u8, bundle: &str) -> String {
    format!(
        "[[policy]]\ndir = \"{dir}\"\nsrc = \"192.168.1.0/24\"\ndst = \"192.168.{net}.0/24\"\naction = \"protect\"\nbundle = [\"{bundle}\"]\n"
    )
}

fn cfg(text: &str) -> Config {
    ipsec_config::from_toml::parse(text).unwrap()
}

fn running_of(text: &str) -> (Engine, Registry) {
    let e = cfg(text).build(secs(0)).unwrap();
    let st = Registry::from_engine(&e);
    (e, st)
}

// ---- diff -------------------------------------------------------------------------------

#[test]
fn diff_finds_added_removed_and_changed_sas() {
    let old = cfg(&[sa("a", 0x10, KEY1), sa("b", 0x11, KEY1), sa("c", 0x12, KEY1)].concat());
    let new = cfg(&[sa("a", 0x10, KEY1), sa("c", 0x13, KEY1), sa("d", 0x14, KEY1)].concat());
    let ch = diff(&old, &new);
    assert_eq!(ch.added, ["d"]);
    assert_eq!(ch.removed, ["b"]);
    assert_eq!(ch.changed, ["c"], "a new SPI is a change");
    assert!(!ch.policies_changed());
    assert!(diff(&old, &old).is_empty());
    assert_eq!(diff(&old, &old).summary(), "nothing changed");
}

#[test]
fn changed_keys_or_lifetimes_count_as_changed() {
    let old = cfg(&[sa("a", 0x10, KEY1), sa("b", 0x11, KEY1)].concat());
    // The same SPI, another key: changed (and a summary that names it, without the key).
    let new = cfg(&[sa("a", 0x10, KEY2), sa("b", 0x11, KEY1)].concat());
    let ch = diff(&old, &new);
    assert_eq!(
        (ch.added.len(), ch.changed.as_slice(), ch.removed.len()),
        (0, &["a".to_string()][..], 0)
    );
    assert!(!ch.summary().contains("a1a2a3"), "{}", ch.summary());
    let with_life = sa("b", 0x11, KEY1) + "lifetime = { hard = { seconds = 60 } }\n";
    let ch = diff(&old, &cfg(&[sa("a", 0x10, KEY1), with_life].concat()));
    assert_eq!(ch.changed, ["b"]);
}

#[test]
fn diff_of_policies_sees_additions_removals_and_reordering() {
    let sas = [sa("x", 0x10, KEY1), sa("y", 0x11, KEY2)].concat();
    let old = cfg(&[sas.clone(), pol("out", 2, "x"), pol("out", 3, "y"), pol("in", 2, "x")].concat());
    // Reordered only (a policy's name does not count).
    let renamed = pol("out", 3, "y").replace("[[policy]]\n", "[[policy]]\nname = \"p\"\n");
    let new = cfg(&[sas.clone(), renamed, pol("out", 2, "x"), pol("in", 2, "x")].concat());
    let ch = diff(&old, &new);
    assert!(ch.policies_reordered);
    assert!(ch.policies_added.is_empty() && ch.policies_removed.is_empty());
    assert!(ch.added.is_empty() && ch.changed.is_empty() && ch.removed.is_empty());
    // The second removed, one added at the end: not a reordering.
    let new = cfg(&[sas.clone(), pol("out", 2, "x"), pol("in", 2, "x"), pol("in", 3, "y")].concat());
    let ch = diff(&old, &new);
    assert_eq!(
        (ch.policies_added.clone(), ch.policies_removed.clone()),
        (vec![3], vec![2])
    );
    assert!(!ch.policies_reordered);
    assert!(
        ch.summary().contains("policies: 1 added, 1 removed"),
        "{}",
        ch.summary()
    );
    // A bundle naming another SA is another policy; duplicates count one by one.
    let new = cfg(&[
        sas.clone(),
        pol("out", 2, "y"),
        pol("out", 3, "y"),
        pol("in", 2, "x"),
        pol("in", 2, "x"),
    ]
    .concat());
    let ch = diff(&old, &new);
    assert_eq!(
        (ch.policies_added.clone(), ch.policies_removed.clone()),
        (vec![1, 4], vec![1])
    );
}

// ---- apply ------------------------------------------------------------------------------

#[test]
fn running_state_reads_back_as_the_config_it_came_from() {
    let text = [
        sa("x", 0x10, KEY1),
        sa("y", 0x11, KEY2),
        pol("out", 2, "x"),
        pol("in", 3, "y"),
    ]
    .concat();
    let (e, st) = running_of(&text);
    assert!(diff(&running(&e, &st), &cfg(&text)).is_empty());
}

#[test]
fn apply_adds_rekeys_retires_and_leaves_the_rest_alone() {
    let text = [sa("keep", 0x10, KEY1), sa("rekey", 0x11, KEY1), sa("gone", 0x12, KEY1)].concat()
        + &pol("out", 2, "keep")
        + &pol("out", 3, "rekey")
        + &pol("out", 4, "gone");
    let (mut e, mut st) = running_of(&text);
    let keep = st.id("keep").unwrap();
    let old_rekey = st.id("rekey").unwrap();
    let gone = st.id("gone").unwrap();
    let new = [sa("keep", 0x10, KEY1), sa("rekey", 0x21, KEY2), sa("fresh", 0x22, KEY3)].concat()
        + &pol("out", 3, "rekey")
        + &pol("out", 2, "keep")
        + &pol("out", 4, "fresh");
    let a = apply(&mut e, &mut st, &cfg(&new), secs(5)).unwrap();
    assert_eq!(a.changes.added, ["fresh"]);
    assert_eq!(a.changes.changed, ["rekey"]);
    assert_eq!(a.changes.removed, ["gone"]);
    assert!(a.changes.policies_reordered);
    let kinds: Vec<&str> = a.events.iter().map(|v| v.kind()).collect();
    assert_eq!(
        kinds,
        [
            "sa.added",
            "sa.replaced",
            "policy.removed",
            "policy.added",
            "sa.removed",
            "config.reloaded"
        ]
    );
    assert!(a
        .events
        .iter()
        .all(|v| v.to_json()["reload"] == true || v.kind() == "config.reloaded"));
    assert_eq!(a.events[5].to_json()["sas_changed"], json!(["rekey"]));
    // The unchanged SA keeps its id (so its counters, sequence numbers, replay window).
    assert_eq!(st.id("keep"), Some(keep));
    assert_ne!(st.id("rekey"), Some(old_rekey));
    assert_eq!(st.id("gone"), None);
    // Replaced and removed SAs stay installed until idle.
    assert_eq!(st.retiring(), [old_rekey, gone]);
    assert_eq!(e.sad().get(gone).unwrap().state(), ipsec_engine::State::Mature);
    // The running state is now the file.
    assert!(diff(&running(&e, &st), &cfg(&new)).is_empty());
    let ps = e.spd().policies();
    assert_eq!(ps[1].action, Action::Protect(vec![keep]));
    assert_eq!(ps[0].action, Action::Protect(vec![st.id("rekey").unwrap()]));
    // Idle long enough: both retired.
    let ev = after_tick(&mut e, &mut st, &[], secs(5) + RETIRE_IDLE, &mut Vec::new());
    assert_eq!(ev.iter().filter(|v| v.kind() == "sa.retired").count(), 2);
    assert!(st.retiring().is_empty());
    // Reloading the same file again changes nothing.
    let a = apply(&mut e, &mut st, &cfg(&new), secs(20)).unwrap();
    assert!(a.changes.is_empty());
    assert_eq!(a.events.len(), 1);
}

#[test]
fn a_file_that_cannot_be_applied_changes_nothing() {
    let text = [sa("x", 0x10, KEY1), sa("y", 0x11, KEY1), pol("out", 2, "x")].concat();
    let (mut e, mut st) = running_of(&text);
    let before = running(&e, &st);
    let ids = (st.id("x"), st.id("y"));
    let cases = [
        // A new key on the same SPI: the old SA would have to go first.
        (
            [sa("x", 0x10, KEY2), sa("y", 0x11, KEY1), pol("out", 2, "x")].concat(),
            "needs a new SPI",
        ),
        // A new SA on a running SA's SPI.
        (
            [sa("x", 0x10, KEY1), sa("y", 0x11, KEY1), sa("z", 0x11, KEY2)].concat(),
            "same protocol, SPI and destination",
        ),
        // A bundle out of seal order (AH before ESP): the config file's own check and message.
        (
            [
                sa("x", 0x10, KEY1),
                sa("y", 0x11, KEY1),
                AH_H.into(),
                pol("out", 2, "h\", \"x"),
            ]
            .concat(),
            "policy #1",
        ),
        // A protocol change under one name.
        (
            [sa("x", 0x10, KEY1), AH_H.replace("\"h\"", "\"y\"")].concat(),
            "changes protocol from esp to ah",
        ),
    ];
    for (new, want) in cases {
        let err = apply(&mut e, &mut st, &cfg(&new), secs(1)).unwrap_err();
        assert!(err.contains(want), "{err:?} should contain {want:?}");
        assert!(!err.contains("a1a2a3"), "key in {err}");
        assert_eq!(running(&e, &st), before);
        assert_eq!((st.id("x"), st.id("y")), ids);
        assert!(st.retiring().is_empty());
    }
}

/// An IPComp SA's alternative CPI is a SAD slot too: an SA rekeyed to a new CPI that keeps
/// its alternative's CPI would collide with the running SA (kept until idle, make before
/// break); that is refused before anything is applied (an SA added with it included).
#[test]
fn a_rekey_onto_a_running_alternative_cpi_changes_nothing() {
    let comp = |cpi: u32| {
        format!(
            "[[sa]]\nname = \"c\"\nproto = \"comp\"\nspi = {cpi:#x}\ncomp = \"deflate\"\nadaptive = \"model\"\n\
             alternative = {{ comp = \"lzf\", cpi = 0xf001 }}\n"
        )
    };
    let (mut e, mut st) = running_of(&comp(0x4001));
    let before = running(&e, &st);
    let new = [sa("a", 0x20, KEY1), comp(0x4002)].concat();
    let err = apply(&mut e, &mut st, &cfg(&new), secs(1)).unwrap_err();
    assert!(err.contains("SA `c`"), "{err}");
    assert_eq!(running(&e, &st), before);
    assert!(st.id("a").is_none(), "the SA added with it was not added");
}

/// An empty or cut-short file (no SA, no policy) is refused and the running config kept,
/// unless it is empty on purpose: TOML `sa = []` and `policy = []`, setkey `flush;` and
/// `spdflush;`.
#[test]
fn an_empty_file_is_refused_unless_empty_on_purpose() {
    let text = [sa("x", 0x10, KEY1), pol("out", 2, "x")].concat();
    let (mut e, mut st) = running_of(&text);
    let before = running(&e, &st);
    let setkey = |t: &str| ipsec_config::parse(t, ipsec_config::Format::Setkey).unwrap().config;
    for new in [
        cfg(""),
        cfg("# only a comment\n"),
        cfg("[tunnel]\npeer = \"10.99.0.2\"\n"),
        cfg("sa = []\n"),
        setkey("flush;\n"),
        setkey("spdflush;\n"),
        setkey("# nothing\n"),
    ] {
        let err = apply(&mut e, &mut st, &new, secs(1)).unwrap_err();
        assert_eq!(err, EMPTY_REFUSED);
        assert_eq!(running(&e, &st), before);
        assert!(st.retiring().is_empty());
    }
    // setkey's flushes followed by an add are not empty: an ordinary reload.
    assert!(
        !setkey("flush;\nspdflush;\nadd 10.0.0.1 10.0.0.2 esp 0x300 -E null -A hmac-sha1 \"12345678901234567890\";\n")
            .empty_on_purpose
    );
    // On purpose: everything goes (SAs retired as a removed SA is: kept until idle).
    for new in [cfg("sa = []\npolicy = []\n"), setkey("flush;\nspdflush;\n")] {
        assert!(new.empty_on_purpose);
        let (mut e, mut st) = running_of(&text);
        let a = apply(&mut e, &mut st, &new, secs(1)).unwrap();
        assert_eq!(a.changes.removed, ["x"]);
        assert_eq!(a.changes.policies_removed, [1]);
        assert!(e.spd().policies().is_empty());
        assert_eq!(st.retiring().len(), 1);
    }
    // An empty file on an empty daemon changes nothing and is no error.
    let (mut e, mut st) = (Engine::new(), Registry::default());
    assert!(apply(&mut e, &mut st, &cfg(""), secs(1)).unwrap().changes.is_empty());
}

#[test]
fn a_policy_on_an_sa_deleted_over_the_socket_is_replaced() {
    let text = [sa("x", 0x10, KEY1), pol("out", 2, "x")].concat();
    let (mut e, mut st) = running_of(&text);
    let h = handle(br#"{"v":1,"op":"sa.del","name":"x"}"#, &mut e, &mut st, secs(1));
    assert_eq!(h.response.to_json()["ok"], true);
    let run = running(&e, &st);
    assert_eq!(run.policies[0].action, ActionConfig::Protect(vec!["#0".into()]));
    // Reloading the file puts x back and points the policy at it.
    let a = apply(&mut e, &mut st, &cfg(&text), secs(2)).unwrap();
    assert_eq!(a.changes.added, ["x"]);
    assert_eq!(
        (a.changes.policies_added.clone(), a.changes.policies_removed.clone()),
        (vec![1], vec![1])
    );
    assert_eq!(e.spd().policies()[0].action, Action::Protect(vec![st.id("x").unwrap()]));
}

// ---- a reload while packets flow --------------------------------------------------------

/// A TUN device: packets queued to be read, packets written.
#[derive(Default)]
struct Tun {
    to_read: Mutex<VecDeque<Vec<u8>>>,
    written: Mutex<Vec<Vec<u8>>>,
}

impl TunIo for Tun {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.to_read.lock().unwrap().pop_front() {
            Some(p) => {
                buf[..p.len()].copy_from_slice(&p);
                Ok(Some(p.len()))
            }
            None => {
                thread::sleep(Duration::from_millis(1));
                Ok(None)
            }
        }
    }
    fn send(&self, packet: &[u8]) -> io::Result<()> {
        self.written.lock().unwrap().push(packet.to_vec());
        Ok(())
    }
}

/// The wire: what one host sends, the other reads.
#[derive(Default)]
struct Wire(Mutex<VecDeque<Vec<u8>>>);

impl UnderlayTx for Wire {
    fn send_to(&self, packet: &[u8], _route: &ipsec_engine::Route) -> io::Result<()> {
        self.0.lock().unwrap().push_back(packet.to_vec());
        Ok(())
    }
}

impl UnderlayRx for Wire {
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.0.lock().unwrap().pop_front() {
            Some(p) => {
                buf[..p.len()].copy_from_slice(&p);
                Ok(Some(p.len()))
            }
            None => {
                thread::sleep(Duration::from_millis(1));
                Ok(None)
            }
        }
    }
}

/// A UDP packet 192.168.1.1 -> 192.168.`net`.1 carrying `seq`.
fn udp(net: u8, seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4([192, 168, 1, 1], [192, 168, net, 1], 64)
        .udp(1000, 2000)
        .write(&mut out, &seq.to_be_bytes().repeat(25))
        .unwrap();
    out
}

fn spd_text(dir: &str, flows: &[(u8, &str)]) -> String {
    flows.iter().map(|&(net, b)| pol(dir, net, b)).collect()
}

fn sa_of(s: &ipsec_engine::Snapshot, id: SaId) -> &ipsec_engine::SaSnapshot {
    s.sas.iter().find(|x| x.id == id).unwrap()
}

#[test]
fn reload_while_packets_flow_loses_nothing_and_unaffected_counters_go_on() {
    let dir = std::env::temp_dir().join(format!("ctl-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let peer = vec![std::net::IpAddr::from([10, 99, 0, 2])];
    // Flow 2 over SA `steady`, flow 3 over `rekeyed`; the reload gives `rekeyed` a new SPI
    // and key and adds flow 4 over a new SA `fresh`. A sends, B receives.
    let v1 = [sa("steady", 0x1000, KEY1), sa("rekeyed", 0x2000, KEY2)].concat();
    let v2 = [
        sa("steady", 0x1000, KEY1),
        sa("rekeyed", 0x2001, KEY3),
        sa("fresh", 0x3000, KEY2),
    ]
    .concat();
    let flows1: &[(u8, &str)] = &[(2, "steady"), (3, "rekeyed")];
    let flows2: &[(u8, &str)] = &[(2, "steady"), (3, "rekeyed"), (4, "fresh")];
    let file = |host: &str, text: String| {
        let p = dir.join(format!("{host}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    };
    let pa = file("a", v1.clone() + &spd_text("out", flows1));
    let pb = file("b", v1.clone() + &spd_text("in", flows1));
    let build = |p: &Path| ipsec_config::load(p, None).unwrap().config.build(secs(0)).unwrap();
    let (a, b) = (
        Tunnel::new(build(&pa), peer.clone()),
        Tunnel::new(build(&pb), peer.clone()),
    );
    let (ca, cb) = (Control::new(&a.engine(), None), Control::new(&b.engine(), None));
    let steady_a = ca.state().id("steady").unwrap();
    let steady_b = cb.state().id("steady").unwrap();
    let (tun_a, tun_b, wire) = (Tun::default(), Tun::default(), Wire::default());
    let stop = AtomicBool::new(false);
    let mut sent = 0;
    let push = |nets: &[u8], n: u32| {
        for i in 0..n {
            for &net in nets {
                tun_a.to_read.lock().unwrap().push_back(udp(net, i));
            }
        }
        nets.len() * n as usize
    };
    let delivered = |n: usize| {
        let t0 = Instant::now();
        while tun_b.written.lock().unwrap().len() < n && t0.elapsed() < secs(10) {
            thread::sleep(Duration::from_millis(2));
        }
        tun_b.written.lock().unwrap().len()
    };
    let (mut before_a, mut before_b) = (0, 0);
    /// Stops the loops when the scope's body ends, also by a failed assertion (which would
    /// otherwise wait for them forever).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| run_outbound(&a, &tun_a, &wire, &stop));
        s.spawn(|| run_inbound(&b, &wire, &tun_b, &stop));
        sent += push(&[2, 3], 200);
        assert_eq!(delivered(sent), sent);
        before_a = a.engine().sad().get(steady_a).unwrap().outbound().packets;
        before_b = b.engine().sad().get(steady_b).unwrap().inbound().packets;
        assert_eq!((before_a, before_b), (200, 200));
        // Packets queued on both sides of each reload: some are sealed with the old SA and
        // opened after B switched, some sealed after A switched.
        sent += push(&[2, 3], 300);
        std::fs::write(&pb, v2.clone() + &spd_text("in", flows2)).unwrap();
        let ch = cb.reload(&b, &pb, &peer).unwrap();
        assert_eq!(
            (ch.added.as_slice(), ch.changed.as_slice()),
            (&["fresh".to_string()][..], &["rekeyed".to_string()][..])
        );
        sent += push(&[2, 3], 300);
        std::fs::write(&pa, v2.clone() + &spd_text("out", flows2)).unwrap();
        ca.reload(&a, &pa, &peer).unwrap();
        sent += push(&[2, 3, 4], 300);
        assert_eq!(delivered(sent), sent);
        stop.store(true, Ordering::Relaxed);
    });
    // Every packet arrived, none was dropped by either side.
    let (ra, rb) = (a.tick().0, b.tick().0);
    assert_eq!(sent, 200 * 2 + 300 * 2 * 2 + 300 * 3);
    assert_eq!(rb.daemon.tun_tx_packets, sent as u64);
    assert_eq!((ra.daemon.engine_out_drops, rb.daemon.engine_in_drops), (0, 0));
    // The unaffected SA is the same SA, its counters went on from where they were.
    assert_eq!(ca.state().id("steady"), Some(steady_a));
    assert_eq!(cb.state().id("steady"), Some(steady_b));
    assert_eq!(sa_of(&ra.engine, steady_a).outbound.packets, before_a + 900);
    assert_eq!(sa_of(&rb.engine, steady_b).inbound.packets, before_b + 900);
    // The rekeyed SA's traffic moved to the new SA; the old one is retiring.
    let new_b = cb.state().id("rekeyed").unwrap();
    let old_b = cb.state().retiring()[0];
    let (old_in, new_in) = (
        sa_of(&rb.engine, old_b).inbound.packets,
        sa_of(&rb.engine, new_b).inbound.packets,
    );
    assert_eq!(old_in + new_in, 200 + 900);
    assert!(new_in >= 300, "{new_in}");
    assert_eq!(sa_of(&rb.engine, cb.state().id("fresh").unwrap()).inbound.packets, 300);
    std::fs::remove_dir_all(&dir).unwrap();
}
