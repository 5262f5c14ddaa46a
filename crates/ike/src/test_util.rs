//! Helpers shared by the unit tests of several modules.

use crate::header::{ExchangeType, HeaderRepr};

/// An IKE_AUTH request header (SPIs 1 and 2, message ID 1) for sealing and fragmenting tests.
pub(crate) fn hdr() -> HeaderRepr {
    HeaderRepr {
        spi_i: 1,
        spi_r: 2,
        next_payload: 0,
        exchange: ExchangeType::IkeAuth,
        initiator: true,
        response: false,
        message_id: 1,
        length: 0,
    }
}

/// A config of one PSK connection `c` from 10.0.0.2 to 10.0.0.1 with the IKE proposal `prop`.
pub(crate) fn psk_config(prop: &str) -> crate::config::Config {
    let c = crate::config::Connection::new(
        "c",
        "10.0.0.2".parse().unwrap(),
        Some("10.0.0.1".parse().unwrap()),
        crate::Identity::from_str_config("10.0.0.2").unwrap(),
        None,
        crate::config::Psk::new(b"k"),
        prop,
    )
    .unwrap();
    crate::config::Config::new(alloc::vec![c])
}

/// A PSK connection `name` from `local` to `remote` (both IP addresses, also its identities),
/// the key "k", AES-GCM with x25519, and one child `net` between the selectors `l` and `r`.
pub(crate) fn psk_conn(name: &str, local: &str, remote: &str, l: &str, r: &str) -> crate::config::Connection {
    let mut c = crate::config::Connection::new(
        name,
        local.parse().unwrap(),
        Some(remote.parse().unwrap()),
        crate::Identity::from_str_config(local).unwrap(),
        Some(crate::Identity::from_str_config(remote).unwrap()),
        crate::config::Psk::new(b"k"),
        "aes128gcm16-prfsha256-x25519",
    )
    .unwrap();
    c.children
        .push(crate::config::ChildConfig::new("net", l, r, "aes128gcm16").unwrap());
    c
}

/// The wall-clock time the EAP tests' certificates are checked at.
pub(crate) const EAP_NOW_UNIX: u64 = 1_811_808_000;

/// The user alice with the password "pw", for the EAP tests' servers.
pub(crate) struct Alice;
impl ipsec_eap::mschapv2::Credentials for Alice {
    fn nt_hash(&self, identity: &[u8]) -> Option<ipsec_eap::ms_chap::NtHash> {
        (identity == b"alice").then(|| ipsec_eap::ms_chap::NtHash::from_password("pw").unwrap())
    }
}

/// An EAP client `a` (10.0.0.1, alice with `password`, trusting the test root CA) and a
/// server `b` (10.0.0.2, moon.strongswan.org's certificate through the intermediate) whose
/// clients authenticate with EAP through `backend` and `creds`; both clocks at
/// [`EAP_NOW_UNIX`].
pub(crate) fn eap_endpoints(
    password: &str,
    backend: ipsec_eap::server::Backend,
    creds: alloc::sync::Arc<dyn crate::config::EapCredentials>,
) -> (crate::Endpoint, crate::Endpoint) {
    use crate::config::{ChildConfig, Config, Connection, LocalAuth, Psk, RemoteAuth, SendCert};
    use crate::pki::{Certificate, PrivateKey, RingSigner, TrustStore};
    use crate::Identity;
    use alloc::sync::Arc;
    use core::time::Duration;
    const MOON_KEY: &[u8] = include_bytes!("../tests/data/pki/moon.key");
    const MOON: &[u8] = include_bytes!("../tests/data/pki/moon.pem");
    const ROOT: &[u8] = include_bytes!("../tests/data/pki/root-ca.pem");
    const INTER: &[u8] = include_bytes!("../tests/data/pki/inter-ca.pem");
    let conn = |name: &str, l: &str, r: &str| {
        let mut c = Connection::new(
            name,
            l.parse().unwrap(),
            Some(r.parse().unwrap()),
            Identity::from_str_config(l).unwrap(),
            None,
            Psk::new(b"-"),
            "aes128gcm16-prfsha256-x25519",
        )
        .unwrap();
        c.children.push(ChildConfig::new("net", "", "", "aes128gcm16").unwrap());
        c
    };
    let mut a = conn("a", "10.0.0.1", "10.0.0.2");
    a.local_auth = LocalAuth::Eap {
        identity: b"alice".to_vec(),
        password: Psk::new(password.as_bytes()),
    };
    let mut t = TrustStore::new();
    for c in Certificate::parse_pem_or_der(ROOT).unwrap() {
        t.add_ca(c).unwrap();
    }
    a.remote_auth = RemoteAuth::Pubkey { trust: Arc::new(t) };
    let mut b = conn("b", "10.0.0.2", "10.0.0.1");
    b.local_id = Identity::from_str_config("moon.strongswan.org").unwrap();
    let mut certs = Certificate::parse_pem_or_der(MOON).unwrap();
    certs.extend(Certificate::parse_pem_or_der(INTER).unwrap());
    b.local_auth = LocalAuth::Pubkey {
        signer: Arc::new(RingSigner::new(PrivateKey::from_pem(MOON_KEY).unwrap()).unwrap()),
        certs,
        send_cert: SendCert::Always,
    };
    b.remote_auth = RemoteAuth::Eap { backend, creds };
    let (mut a, mut b) = (
        crate::Endpoint::new(Config::new(alloc::vec![a])),
        crate::Endpoint::new(Config::new(alloc::vec![b])),
    );
    a.set_unix_time(Duration::ZERO, EAP_NOW_UNIX);
    b.set_unix_time(Duration::ZERO, EAP_NOW_UNIX);
    (a, b)
}
