//! The EAP authenticator the IKE responder drives.
