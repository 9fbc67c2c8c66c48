#!/usr/bin/env bash
# Builds the console's committed bundle from its sources: the front end in src/ is plain ES
# modules and CSS served as they are; the one library, Cytoscape.js, is copied from node_modules
# (pinned by package-lock.json) into dist/. `build.sh --check` rebuilds into a temp dir and fails
# when the committed dist/ differs byte for byte. Node.js is needed only here and for the browser
# tests, never to build or run aware (the binary embeds src/ and dist/).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
out=dist
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
cp node_modules/cytoscape/dist/cytoscape.min.js "$out/cytoscape.min.js"
(cd "$out" && sha256sum cytoscape.min.js) > "$out/SHA256SUMS"
(cd src && sha256sum index.html app.js style.css) >> "$out/SHA256SUMS"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r "$out" dist >/dev/null; then
    echo "console/dist differs from a rebuild of its sources; run console/build.sh and commit dist/" >&2
    diff -r "$out" dist >&2 || true
    exit 1
  fi
  echo "console bundle matches its sources ($(wc -c < dist/cytoscape.min.js) + $(cat src/index.html src/app.js src/style.css | wc -c) bytes)"
fi
