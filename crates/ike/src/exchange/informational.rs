//! INFORMATIONAL (RFC 7296 1.4): Delete of child SAs (answered with the Deletes of their
//! pairs, 1.4.1) or of the IKE SA (answered empty), empty requests as liveness checks
//! (2.4), notifies.
use crate::delete::Delete;
use crate::event::{DownReason, Event};
use crate::header::ExchangeType;
use crate::ike_sa::{Cx, IkeSa, Request, State};
use crate::message::Payload;
use alloc::vec::Vec;
use rand_core::CryptoRngCore;

impl IkeSa {
    fn child_down(&mut self, cx: &mut Cx, spi_in: u32, reason: DownReason) {
        let name = self.conn_name(cx.cfg);
        if let Some(i) = self.children.iter().position(|c| c.spi_in() == spi_in) {
            let c = self.children.remove(i);
            cx.out.event(Event::ChildDown {
                conn: name,
                child: c.info.child.clone(),
                spi_in: c.info.spi_in,
                spi_out: c.info.spi_out,
                reason,
            });
        }
    }

    /// A request from the peer.
    pub(crate) fn on_info_request(&mut self, cx: &mut Cx, id: u32, ps: &[Payload], rng: &mut impl CryptoRngCore) {
        let mut resp = Vec::new();
        let mut delete_ike = false;
        let mut our_spis = Vec::new();
        for p in ps {
            match p {
                Payload::Delete(Delete::Ike) => delete_ike = true,
                Payload::Delete(Delete::Esp(spis)) => {
                    for s in spis {
                        // The peer names the SPIs it receives on: our outbound ones.
                        if let Some(c) = self.children.iter().find(|c| c.info.spi_out == *s) {
                            our_spis.push(c.spi_in());
                        }
                    }
                }
                _ => {}
            }
        }
        if delete_ike {
            self.respond(cx, ExchangeType::Informational, id, &[], rng);
            self.kill(cx, DownReason::Peer);
            return;
        }
        if !our_spis.is_empty() && self.state == State::Established {
            for s in &our_spis {
                self.child_down(cx, *s, DownReason::Peer);
            }
            // Our half of each pair, unless we are deleting it ourselves (1.4.1).
            let answer: Vec<u32> = our_spis.iter().copied().filter(|s| !self.deleting_child(*s)).collect();
            if !answer.is_empty() {
                resp.push(Payload::Delete(Delete::Esp(answer)));
            }
        }
        self.respond(cx, ExchangeType::Informational, id, &resp, rng);
    }

    fn deleting_child(&self, spi: u32) -> bool {
        matches!(&self.outstanding, Some(o) if o.req == Request::DeleteChild(spi))
    }

    /// The response to one of our INFORMATIONAL requests.
    pub(crate) fn on_info_response(&mut self, cx: &mut Cx, req: &Request, _ps: &[Payload]) {
        match req {
            Request::DeleteIke => self.kill(cx, DownReason::Local),
            Request::DeleteChild(spi) => self.child_down(cx, *spi, DownReason::Local),
            Request::Dpd => {
                let conn = self.conn_name(cx.cfg);
                cx.out.event(Event::Alive { conn, at: cx.now });
            }
            _ => {}
        }
    }
}
