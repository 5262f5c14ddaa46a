//! The tc ingress filter that ends, before the IP stack, the packets the rings took: a
//! `clsact` qdisc (added if the interface has none) and a classic-BPF `cls_bpf` filter in
//! direct-action mode ([`super::ingress_program`]), installed and removed over rtnetlink
//! (linux/rtnetlink.h, linux/pkt_sched.h, linux/pkt_cls.h).

use super::*;
use crate::dev::rtnetlink::{self, nla, NLMSG_ERROR, NLM_F_REQUEST};

// tc over rtnetlink (linux/rtnetlink.h, linux/pkt_sched.h, linux/pkt_cls.h).
const RTM_NEWQDISC: u16 = 36;
const RTM_NEWTFILTER: u16 = 44;
const RTM_DELTFILTER: u16 = 45;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLA_F_NESTED: u16 = 0x8000;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_BPF_OPS_LEN: u16 = 4;
const TCA_BPF_OPS: u16 = 5;
const TCA_BPF_NAME: u16 = 7;
const TCA_BPF_FLAGS: u16 = 8;
const TCA_BPF_FLAG_ACT_DIRECT: u32 = 1;
/// `TC_H_CLSACT`: the clsact qdisc's parent; its handle is `TC_H_MAKE(TC_H_CLSACT, 0)`.
const TC_H_CLSACT: u32 = 0xffff_fff1;
/// `TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)`: where ingress filters hang.
const TC_INGRESS_PARENT: u32 = 0xffff_fff2;
/// The priority of tunneld's ingress filter: late, so that filters of others run first.
pub const INGRESS_PRIO: u16 = 0xfe50;

/// A `struct tcmsg` request with `attrs`, flags `flags` (and the acknowledgement asked for).
fn tc_message(kind: u16, flags: u16, ifindex: u32, handle: u32, parent: u32, info: u32, attrs: &[u8]) -> Vec<u8> {
    let mut tcmsg = [0u8; 20]; // family AF_UNSPEC and padding, then:
    tcmsg[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    tcmsg[8..12].copy_from_slice(&handle.to_ne_bytes());
    tcmsg[12..16].copy_from_slice(&parent.to_ne_bytes());
    tcmsg[16..20].copy_from_slice(&info.to_ne_bytes());
    rtnetlink::message(kind, NLM_F_REQUEST | NLM_F_ACK | flags, 0, &tcmsg, attrs)
}

/// The request that installs (or replaces) the ingress filter: cls_bpf, direct action, with
/// the classic BPF `prog`, on `ifindex`, for EtherType `proto`, with handle `handle`.
pub fn ingress_filter_request(ifindex: u32, proto: u16, handle: u32, prog: &[(u16, u8, u8, u32)]) -> Vec<u8> {
    let mut ops = Vec::with_capacity(prog.len() * 8);
    for &(code, jt, jf, k) in prog {
        ops.extend_from_slice(&code.to_ne_bytes());
        ops.extend_from_slice(&[jt, jf]);
        ops.extend_from_slice(&k.to_ne_bytes());
    }
    let mut options = nla(TCA_BPF_OPS_LEN, &(prog.len() as u16).to_ne_bytes());
    options.extend(nla(TCA_BPF_OPS, &ops));
    options.extend(nla(TCA_BPF_NAME, b"tunneld\0"));
    options.extend(nla(TCA_BPF_FLAGS, &TCA_BPF_FLAG_ACT_DIRECT.to_ne_bytes()));
    let mut attrs = nla(TCA_KIND, b"bpf\0");
    attrs.extend(nla(TCA_OPTIONS | NLA_F_NESTED, &options));
    let info = u32::from(INGRESS_PRIO) << 16 | u32::from(proto.to_be());
    tc_message(
        RTM_NEWTFILTER,
        NLM_F_CREATE | NLM_F_REPLACE,
        ifindex,
        handle,
        TC_INGRESS_PARENT,
        info,
        &attrs,
    )
}

/// Sends `req` and reads the kernel's acknowledgement: `Ok` or the error it reports.
fn tc_request(nl: &Socket, req: &[u8]) -> io::Result<()> {
    use std::io::Read;
    nl.send(req)?;
    let mut buf = [0u8; 4096];
    let n = (&*nl).read(&mut buf)?;
    let r = &buf[..n];
    if r.len() < 20 || u16::from_ne_bytes([r[4], r[5]]) != NLMSG_ERROR {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no netlink acknowledgement"));
    }
    match i32::from_ne_bytes([r[16], r[17], r[18], r[19]]) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}

/// tunneld's tc ingress filter on one interface ([`ingress_program`]): the packets the rings
/// took end there, after the packet taps and before the IP stack, which would otherwise route
/// each one, deliver it to the raw socket of its protocol (a clone, dropped by that socket's
/// filter) and free it. Removed on drop; a filter left behind by a daemon that was killed is
/// replaced by the next one for the same address (same handle), or removed with
/// `tc filter del dev IF ingress pref 65104` (`INGRESS_PRIO`).
pub struct IngressDrop {
    nl: Socket,
    ifindex: u32,
    handle: u32,
    proto: u16,
}

impl IngressDrop {
    /// Installs the filter for rings with filter `f` on `ifindex` (adding the clsact qdisc
    /// if the interface has none). Needs CAP_NET_ADMIN, `sch_clsact` and `cls_bpf`.
    pub fn install(ifindex: u32, f: &RingFilter) -> io::Result<IngressDrop> {
        let (proto, handle) = match (f.local4, f.local6) {
            (Some(a), None) => (libc::ETH_P_IP as u16, u32::from(a)),
            (None, Some(a)) => (
                libc::ETH_P_IPV6 as u16,
                u32::from_be_bytes(a.octets()[12..].try_into().unwrap_or([0; 4])),
            ),
            _ => (libc::ETH_P_ALL as u16, 1),
        };
        let handle = handle.max(1);
        let nl = rtnetlink::socket(Duration::from_millis(500))?;
        let clsact = tc_message(
            RTM_NEWQDISC,
            NLM_F_CREATE | NLM_F_EXCL,
            ifindex,
            TC_H_CLSACT & 0xffff_0000,
            TC_H_CLSACT,
            0,
            &nla(TCA_KIND, b"clsact\0"),
        );
        match tc_request(&nl, &clsact) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
            _ => {}
        }
        tc_request(
            &nl,
            &ingress_filter_request(ifindex, proto, handle, &ingress_program(f)),
        )?;
        Ok(IngressDrop {
            nl,
            ifindex,
            handle,
            proto,
        })
    }

    /// Removes the filter a killed daemon may have left for `local` (on the interface that
    /// has it), so that a daemon receiving on the raw sockets alone gets those packets.
    /// `Ok(true)`: there was one.
    pub fn remove_stale(local: Ipv4Addr) -> io::Result<bool> {
        let Some(ifindex) = interface_of(IpAddr::V4(local))? else {
            return Ok(false);
        };
        let nl = rtnetlink::socket(Duration::from_millis(500))?;
        let handle = u32::from(local).max(1);
        match tc_request(&nl, &delete_request(ifindex, libc::ETH_P_IP as u16, handle)) {
            Ok(()) => Ok(true),
            // No clsact qdisc (EINVAL), or no filter of ours on it (ENOENT).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The request that removes tunneld's ingress filter with `handle` for `proto` on `ifindex`.
fn delete_request(ifindex: u32, proto: u16, handle: u32) -> Vec<u8> {
    let info = u32::from(INGRESS_PRIO) << 16 | u32::from(proto.to_be());
    tc_message(
        RTM_DELTFILTER,
        0,
        ifindex,
        handle,
        TC_INGRESS_PARENT,
        info,
        &nla(TCA_KIND, b"bpf\0"),
    )
}

impl Drop for IngressDrop {
    fn drop(&mut self) {
        if let Err(e) = tc_request(&self.nl, &delete_request(self.ifindex, self.proto, self.handle)) {
            tracing::warn!("removing the tc ingress filter on interface {}: {e}", self.ifindex);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_requests_have_the_rtnetlink_layout() {
        let prog = ingress_program(&crate::dev::packet_ring::tests::filter());
        let r = ingress_filter_request(7, libc::ETH_P_IP as u16, 0x0a62_0002, &prog);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize, r.len());
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_NEWTFILTER);
        let flags = u16::from_ne_bytes([r[6], r[7]]);
        assert_eq!(flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE);
        assert_eq!(i32::from_ne_bytes(r[20..24].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(r[24..28].try_into().unwrap()), 0x0a62_0002);
        assert_eq!(u32::from_ne_bytes(r[28..32].try_into().unwrap()), TC_INGRESS_PARENT);
        let info = u32::from_ne_bytes(r[32..36].try_into().unwrap());
        assert_eq!(info >> 16, u32::from(INGRESS_PRIO));
        assert_eq!(u16::from_be((info & 0xffff) as u16), libc::ETH_P_IP as u16);
        // TCA_KIND "bpf", then the nested options with the program's instructions.
        assert_eq!(&r[36..44], &[8, 0, 1, 0, b'b', b'p', b'f', 0][..]);
        let opt_len = u16::from_ne_bytes([r[44], r[45]]) as usize;
        assert_eq!(u16::from_ne_bytes([r[46], r[47]]), TCA_OPTIONS | NLA_F_NESTED);
        assert_eq!(44 + opt_len, r.len());
        assert_eq!(u16::from_ne_bytes([r[52], r[53]]) as usize, prog.len());
        assert_eq!(u16::from_ne_bytes([r[56], r[57]]) as usize, 4 + 8 * prog.len());
        let d = delete_request(7, libc::ETH_P_IP as u16, 5);
        assert_eq!(u16::from_ne_bytes([d[4], d[5]]), RTM_DELTFILTER);
        assert_eq!(&d[32..36], &r[32..36]);
    }
}
