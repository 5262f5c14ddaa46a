#!/bin/sh
# Makes the EAP-TLS test PKI (crates/eap/tests/tls.rs) with openssl: a CA with a server
# and a client certificate, and another CA with a client certificate nobody here trusts.
# ECDSA P-256 keys, valid 20 years from the day it is run. Rerun: sh make.sh (in this dir).
set -eu
cd "$(dirname "$0")"
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
ca() { # name subject
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" \
        -out "$1.pem" -days 7300 -subj "$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
leaf() { # name subject ca eku san
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$t/$1.csr" \
        -subj "$2" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' "$4" "$5" >"$t/$1.ext"
    openssl x509 -req -in "$t/$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 7300 \
        -extfile "$t/$1.ext" -out "$1.pem" 2>/dev/null
}
ca ca "/C=CH/O=tunneld test/CN=tunneld test CA"
ca other-ca "/C=CH/O=Other/CN=Other CA"
leaf server "/C=CH/O=tunneld test/CN=vpn.example.org" ca serverAuth "DNS:vpn.example.org"
leaf alice "/C=CH/O=tunneld test/CN=alice@example.org" ca clientAuth "email:alice@example.org"
leaf mallory "/C=CH/O=Other/CN=mallory@example.org" other-ca clientAuth "email:mallory@example.org"
rm -f ./*.srl
