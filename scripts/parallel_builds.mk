# Builds build-check/ and build-sanitize/ in one pool of jobs (scripts/test.sh runs it as
# `make -j<cores> -f scripts/parallel_builds.mk START=<epoch seconds>`): the `+` hands GNU make's
# jobserver to both builds, so the two together run at most <cores> compilers. Two builds of -j2
# each ran four on CI's two cores, and every compilation then took about 1.26 times the CPU it
# takes on a core of its own (cache contention; measured in CONTRIBUTING.md, "Test").
# build-check/ runs its ctest in its own job slot as soon as it is built. Each step writes its
# exit status to <dir>/<step>.status and its output to <dir>/<step>.log; test.sh reads them.
.PHONY: all check sanitize
all: check sanitize

check:
	+@cmake --build build-check >build-check/build.log 2>&1; echo $$? >build-check/build.status
	@if [ "$$(cat build-check/build.status)" = 0 ]; then \
	  echo "    build-check/ built after $$(( $$(date +%s) - $(START) )) s; its ctest runs now"; \
	  ctest --test-dir build-check --output-on-failure >build-check/ctest.log 2>&1; \
	  echo $$? >build-check/ctest.status; \
	fi

# The unit tests first: their largest unit (models, about 590 s of CPU) is the longest job of the
# check. Left to make's order it started 233 s into the build and the build ended with it, at
# 826 s (fresh clone, 2026-12-06); first, it starts within seconds, in this recipe's own slot.
sanitize:
	+@{ cmake --build build-sanitize --target coulomb_tests && cmake --build build-sanitize; } \
	  >build-sanitize/build.log 2>&1; \
	  echo $$? >build-sanitize/build.status; \
	  echo "    build-sanitize/ built after $$(( $$(date +%s) - $(START) )) s (exit status $$(cat build-sanitize/build.status))"
