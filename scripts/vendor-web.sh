#!/bin/sh
# Refreshes web/vendor/ from the npm registry at the pinned versions below (`make vendor`).
# The vendored files are committed: running or testing the server never needs npm.
set -eu
PREACT=11.2.0
HTM=3.1.1
MARKED=18.2.1
DOMPURIFY=3.5.0

out="$(cd "$(dirname "$0")/.." && pwd)/web/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "preact@$PREACT" "htm@$HTM" "marked@$MARKED" "dompurify@$DOMPURIFY" >/dev/null
for name in preact htm marked dompurify; do
    mkdir "$name" && tar xzf "$name"-*.tgz -C "$name"
done

# Copy an ES module without its source-map comment (the maps are not shipped).
copy() { grep -v '^//# sourceMappingURL=' "$1" > "$out/$2"; }

rm -rf "$out" && mkdir -p "$out/licenses"
copy preact/package/dist/preact.mjs preact.mjs
# The hooks import the bare specifier "preact"; a browser without an import map (the CSP forbids
# inline scripts) needs a relative path.
copy preact/package/hooks/dist/hooks.mjs hooks.mjs
sed -i 's#from"preact"#from"./preact.mjs"#g; s#from "preact"#from "./preact.mjs"#g' "$out/hooks.mjs"
copy htm/package/dist/htm.mjs htm.mjs
copy marked/package/lib/marked.esm.js marked.mjs
copy dompurify/package/dist/purify.es.mjs purify.mjs
cp preact/package/LICENSE "$out/licenses/preact-LICENSE"
cp htm/package/LICENSE "$out/licenses/htm-LICENSE"
cp marked/package/LICENSE "$out/licenses/marked-LICENSE"
cp dompurify/package/LICENSE "$out/licenses/dompurify-LICENSE"
cp dompurify/package/LICENSE-MPL "$out/licenses/dompurify-LICENSE-MPL"
printf 'preact %s\nhtm %s\nmarked %s\ndompurify %s\n' "$PREACT" "$HTM" "$MARKED" "$DOMPURIFY" > "$out/VERSIONS"
if grep -q 'from *"preact' "$out/hooks.mjs"; then echo "vendor: hooks still import bare preact" >&2; exit 1; fi
echo "web/vendor refreshed: $(tr '\n' ' ' < "$out/VERSIONS")"
