#!/usr/bin/env bash
# Builds the Debian package ipsec-tunneld (both binaries, man pages, shell completions, the
# systemd unit, example configs) with dpkg-deb from a staging tree: no cargo-deb needed.
#
#   bash scripts/packaging/make-deb.sh            # writes out/deb/ipsec-tunneld_VERSION_ARCH.deb, prints its path
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v dpkg-deb >/dev/null || { echo "make-deb: needs dpkg-deb (Debian's dpkg)" >&2; exit 2; }
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
OUT=${OUT:-out/deb}
cargo build --release --locked --quiet --bin ipsec --bin tunneld
ROOT=$(mktemp -d /tmp/ipsec-deb.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
P=$ROOT/ipsec-tunneld
install -D -m 0755 target/release/ipsec "$P/usr/bin/ipsec"
install -D -m 0755 target/release/tunneld "$P/usr/bin/tunneld"
strip --strip-debug "$P/usr/bin/ipsec" "$P/usr/bin/tunneld" 2>/dev/null || true
rm -rf "$OUT/gen"
cargo run --release --locked --quiet --example gen-man -- "$OUT/gen" >/dev/null
for sec in 1 8; do
  install -d "$P/usr/share/man/man$sec"
  for m in "$OUT/gen/man$sec"/*."$sec"; do gzip -9n <"$m" >"$P/usr/share/man/man$sec/$(basename "$m").gz"; done
done
install -D -m 0644 "$OUT/gen/completions/ipsec.bash" "$P/usr/share/bash-completion/completions/ipsec"
install -D -m 0644 "$OUT/gen/completions/tunneld.bash" "$P/usr/share/bash-completion/completions/tunneld"
install -D -m 0644 "$OUT/gen/completions/_ipsec" "$P/usr/share/zsh/vendor-completions/_ipsec"
install -D -m 0644 "$OUT/gen/completions/_tunneld" "$P/usr/share/zsh/vendor-completions/_tunneld"
install -D -m 0644 "$OUT/gen/completions/ipsec.fish" "$P/usr/share/fish/vendor_completions.d/ipsec.fish"
install -D -m 0644 "$OUT/gen/completions/tunneld.fish" "$P/usr/share/fish/vendor_completions.d/tunneld.fish"
install -D -m 0644 dist/systemd/tunneld@.service "$P/lib/systemd/system/tunneld@.service"
install -d "$P/usr/share/doc/ipsec-tunneld/examples"
install -m 0644 examples/tunnel/*.toml "$P/usr/share/doc/ipsec-tunneld/examples/"
install -m 0644 README.md docs/service.md "$P/usr/share/doc/ipsec-tunneld/"
cat >"$P/usr/share/doc/ipsec-tunneld/copyright" <<'COPY'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ipsec
License: MIT OR Apache-2.0
COPY
install -d "$P/DEBIAN"
install -m 0755 dist/debian/postinst dist/debian/postrm "$P/DEBIAN/"
SIZE=$(du -sk "$P" | cut -f1)
cat >"$P/DEBIAN/control" <<CTRL
Package: ipsec-tunneld
Version: $VERSION
Architecture: $ARCH
Maintainer: ipsec maintainers <maintainers@localhost>
Installed-Size: $SIZE
Depends: libc6, adduser
Section: net
Priority: optional
Description: userspace IPsec: ESP, AH, IPComp and IKEv2 without kernel XFRM
 tunneld carries a TUN device's packets to peers through ESP (raw or in UDP), AH and IPComp,
 negotiating its SAs with IKEv2 (pre-shared keys) or taking them from its config; the ipsec
 tool seals and opens pcap captures and talks to tunneld's control socket. Includes a
 hardened systemd unit template (tunneld@.service), man pages and shell completions.
CTRL
mkdir -p "$OUT"
DEB=$OUT/ipsec-tunneld_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group --build "$P" "$DEB" >/dev/null
echo "$DEB"
