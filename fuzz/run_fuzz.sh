#!/bin/sh
# Build the libFuzzer harness over the plain-C core with ASan+UBSan, seed it from the golden
# fixtures' payloads and the regression corpus, and fuzz for a bounded time.
# Usage: fuzz/run_fuzz.sh [seconds]   (default 60; needs clang with libFuzzer)
set -eu
SECONDS_TO_RUN="${1:-60}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/build/fuzz"
PY="${PYTHON:-python3}"
mkdir -p "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
SRC="$ROOT/tfrecord_beam/_native"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$SRC" \
    "$ROOT/fuzz/fuzz_core.c" "$SRC/tfr_crc32c.c" "$SRC/tfr_framing.c" "$SRC/tfr_wire.c" \
    "$SRC/tfr_example.c" "$SRC/tfr_encode.c" "$SRC/tfr_index.c" "$SRC/tfr_stats.c" "$SRC/tfr_buf.c" -o "$OUT/fuzz_core"
"$PY" "$ROOT/fuzz/make_seeds.py" "$OUT/seeds"
"$OUT/fuzz_core" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$OUT/artifacts/" -print_final_stats=1 \
    "$OUT/corpus" "$OUT/seeds" "$ROOT/tests/fuzz_corpus"
