#!/usr/bin/env bash
# Writes the certificate fixtures of crates/ike/tests/pki.rs (crates/ike/tests/data/pki/) with
# openssl: a root CA (RSA-2048), an intermediate CA (ECDSA P-384), end-entity certificates for
# RSA-2048 (moon), ECDSA P-256 (sun), P-384 (carol) and Ed25519 (dave) with SANs, one expired,
# one issued by a CA the tests do not trust, one revoked by the root's CRL, one with only the
# codeSigning EKU; their keys in PKCS#1, SEC1 and PKCS#8 PEM; signatures openssl made over
# msg.bin; and what openssl says about the certificates (subject DNs, CA key IDs), which the
# tests compare with what the crate computes. Everything is valid for 20 years except
# expired.pem. Re-runnable: every run makes new keys, so commit the whole directory together.
#   scripts/lib/gen-test-certs.sh [outdir]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-crates/ike/tests/data/pki}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/gen-test-certs.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"
DAYS=7300
export SAN=unused.strongswan.org
rm -f "$OUT"/*.pem "$OUT"/*.key "$OUT"/*.der "$OUT"/*.bin "$OUT"/*.txt

# Extension sections for `openssl x509 -req -extfile ext.cnf -extensions NAME`.
cat >ext.cnf <<'CNF'
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[moon]
basicConstraints = CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:moon.strongswan.org, IP:192.168.0.1, IP:fec0::1, email:moon@strongswan.org
[sun]
basicConstraints = CA:FALSE
subjectAltName = DNS:sun.strongswan.org, IP:192.168.0.2
[carol]
basicConstraints = CA:FALSE
extendedKeyUsage = 1.3.6.1.5.5.7.3.17
subjectAltName = email:carol@strongswan.org, DNS:carol.strongswan.org
[dave]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
subjectAltName = email:dave@strongswan.org, IP:10.1.0.20
[plain]
basicConstraints = CA:FALSE
subjectAltName = DNS:$ENV::SAN
[codesign]
basicConstraints = CA:FALSE
extendedKeyUsage = codeSigning
subjectAltName = DNS:codesign.strongswan.org
CNF

# `openssl ca` for what `x509 -req` cannot do in OpenSSL 3.0: a validity in the past, the CRL.
mkdir -p db/new
: >db/index.txt
echo 1000 >db/crlnumber
cat >ca.cnf <<CNF
[ca]
default_ca = root
[root]
dir = $W/db
database = \$dir/index.txt
new_certs_dir = \$dir/new
serial = \$dir/serial
crlnumber = \$dir/crlnumber
certificate = $OUT/root-ca.pem
private_key = $W/root-ca.key
default_md = sha256
default_crl_days = $DAYS
policy = anything
copy_extensions = none
crl_extensions = crl_ext
unique_subject = no
[anything]
countryName = optional
organizationName = optional
commonName = supplied
[crl_ext]
authorityKeyIdentifier = keyid:always
[expired]
basicConstraints = CA:FALSE
subjectAltName = DNS:expired.strongswan.org
CNF

# issue NAME KEY SUBJECT CA_CERT CA_KEY SECTION SERIAL
issue() {
  openssl req -new -key "$2" -subj "$3" -out "$1.csr"
  openssl x509 -req -in "$1.csr" -CA "$4" -CAkey "$5" -set_serial "$7" -days $DAYS -sha256 \
    -extfile ext.cnf -extensions "$6" -out "$OUT/$1.pem" 2>/dev/null
}

# Root CA (RSA-2048, PKCS#1 key) and an unrelated "other" root nobody trusts.
openssl genrsa -traditional -out root-ca.key 2048 2>/dev/null
openssl req -x509 -new -key root-ca.key -subj "/C=CH/O=strongSwan/CN=strongSwan Root CA" -days $DAYS \
  -sha256 -set_serial 1 -extensions ca -config ext.cnf -out "$OUT/root-ca.pem"
openssl ecparam -name prime256v1 -genkey -noout -out other-ca.key
openssl req -x509 -new -key other-ca.key -subj "/C=CH/O=Other/CN=Other Root CA" -days $DAYS \
  -set_serial 1 -extensions ca -config ext.cnf -out "$OUT/other-ca.pem"

# Intermediate CA (ECDSA P-384) under the root.
openssl ecparam -name secp384r1 -genkey -noout -out inter-ca.key
issue inter-ca inter-ca.key "/C=CH/O=strongSwan/OU=Intermediate/CN=strongSwan Intermediate CA" \
  "$OUT/root-ca.pem" root-ca.key ca 2

# End entities. moon: RSA-2048 (PKCS#1 PEM, and the same key as PKCS#8), under the intermediate.
openssl genrsa -traditional -out "$OUT/moon.key" 2048 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in "$OUT/moon.key" -out "$OUT/moon-pkcs8.key"
issue moon "$OUT/moon.key" "/C=CH/O=strongSwan/CN=moon.strongswan.org" "$OUT/inter-ca.pem" inter-ca.key moon 0x1001
# sun: ECDSA P-256 (SEC1 PEM), under the root, no EKU, a longer DN.
openssl ecparam -name prime256v1 -genkey -noout -out "$OUT/sun.key"
issue sun "$OUT/sun.key" "/C=CH/ST=Zurich/L=Rapperswil/O=strongSwan/OU=Test/CN=sun.strongswan.org/emailAddress=sun@strongswan.org" \
  "$OUT/root-ca.pem" root-ca.key sun 0x1002
# carol: ECDSA P-384 (PKCS#8 PEM), under the intermediate, EKU ipsecIKE.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:secp384r1 -out "$OUT/carol.key"
issue carol "$OUT/carol.key" "/C=CH/O=strongSwan/OU=Research/CN=carol@strongswan.org" "$OUT/inter-ca.pem" inter-ca.key carol 0x1003
# dave: Ed25519 (PKCS#8 PEM), under the root, EKU clientAuth, DC and serialNumber in the DN.
openssl genpkey -algorithm ED25519 -out "$OUT/dave.key"
issue dave "$OUT/dave.key" "/DC=org/DC=strongswan/O=strongSwan/serialNumber=0042/CN=dave@strongswan.org" \
  "$OUT/root-ca.pem" root-ca.key dave 0x1004
# Refusals: issued by the other root; revoked by the root's CRL; only codeSigning; expired.
openssl ecparam -name prime256v1 -genkey -noout -out ee.key
SAN=unknown.strongswan.org issue unknown ee.key "/C=CH/O=strongSwan/CN=unknown.strongswan.org" "$OUT/other-ca.pem" other-ca.key plain 0x2001
SAN=revoked.strongswan.org issue revoked ee.key "/C=CH/O=strongSwan/CN=revoked.strongswan.org" "$OUT/root-ca.pem" root-ca.key plain 0x2002
issue codesign ee.key "/C=CH/O=strongSwan/CN=codesign.strongswan.org" "$OUT/root-ca.pem" root-ca.key codesign 0x2003
openssl req -new -key ee.key -subj "/C=CH/O=strongSwan/CN=expired.strongswan.org" -out expired.csr
echo 2004 >db/serial
openssl ca -batch -config ca.cnf -in expired.csr -startdate 20200101000000Z -enddate 20210101000000Z \
  -extensions expired -notext -out "$OUT/expired.pem" 2>/dev/null
openssl ca -config ca.cnf -revoke "$OUT/revoked.pem" -crl_reason keyCompromise 2>/dev/null
openssl ca -config ca.cnf -gencrl -out "$OUT/root-ca.crl.pem" 2>/dev/null
openssl crl -in "$OUT/root-ca.crl.pem" -outform DER -out "$OUT/root-ca.crl.der"
openssl x509 -in "$OUT/moon.pem" -outform DER -out "$OUT/moon.der"
cat "$OUT/moon.pem" "$OUT/inter-ca.pem" >"$OUT/moon-chain.pem"

# Signatures over msg.bin, made by openssl (PSS: salt length = hash length, MGF1 with the same
# hash, as RFC 7427 and strongSwan use). ECDSA signatures are DER; asn1parse shows r and s.
printf 'IKEv2 signed octets: RFC 7296 2.15, the test message of gen-test-certs.sh\n' >"$OUT/msg.bin"
for h in sha1 sha256 sha384 sha512; do
  openssl dgst -$h -sign "$OUT/moon.key" -out "$OUT/moon-pkcs1-$h.bin" "$OUT/msg.bin"
done
for h in sha256 sha384 sha512; do
  openssl dgst -$h -sign "$OUT/moon.key" -sigopt rsa_padding_mode:pss -sigopt rsa_pss_saltlen:digest \
    -sigopt rsa_mgf1_md:$h -out "$OUT/moon-pss-$h.bin" "$OUT/msg.bin"
done
openssl dgst -sha256 -sign "$OUT/sun.key" -out "$OUT/sun-ecdsa-sha256.der" "$OUT/msg.bin"
openssl asn1parse -inform DER -in "$OUT/sun-ecdsa-sha256.der" >"$OUT/sun-ecdsa-sha256.asn1parse.txt"
openssl dgst -sha384 -sign "$OUT/carol.key" -out "$OUT/carol-ecdsa-sha384.der" "$OUT/msg.bin"
openssl asn1parse -inform DER -in "$OUT/carol-ecdsa-sha384.der" >"$OUT/carol-ecdsa-sha384.asn1parse.txt"
openssl pkeyutl -sign -inkey "$OUT/dave.key" -rawin -in "$OUT/msg.bin" -out "$OUT/dave-ed25519.bin"

# What openssl says: subjects in certificate RDN order with short names ("C=CH, O=..., CN=..."),
# and the SHA-1 of each certificate's SubjectPublicKeyInfo (a CERTREQ's CA key ID, RFC 7296 3.7).
: >"$OUT/openssl-subjects.txt"
: >"$OUT/openssl-spki-sha1.txt"
for c in root-ca other-ca inter-ca moon sun carol dave unknown revoked codesign expired; do
  printf '%s\t%s\n' "$c" "$(openssl x509 -in "$OUT/$c.pem" -noout -subject -nameopt sep_comma_plus_space,sname,utf8 | sed 's/^subject=//')" >>"$OUT/openssl-subjects.txt"
  printf '%s\t%s\n' "$c" "$(openssl x509 -in "$OUT/$c.pem" -noout -pubkey | openssl pkey -pubin -outform DER | sha1sum | cut -d' ' -f1)" >>"$OUT/openssl-spki-sha1.txt"
done
ls "$OUT"
