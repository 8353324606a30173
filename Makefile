# Bounded libFuzzer run (ASan+UBSan) over the compiled core; see fuzz/run_fuzz.sh.
FUZZ_SECONDS ?= 60
fuzz:
	PYTHON=$${PYTHON:-python3} fuzz/run_fuzz.sh $(FUZZ_SECONDS)
.PHONY: fuzz
