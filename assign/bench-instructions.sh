#!/bin/bash
# Instructions per operation of BenchmarkTarget's timed steps, counted by
# callgrind, which the machine's load does not disturb (wall-clock times on a
# shared machine vary by 2x or more between runs).
#
# usage: assign/bench-instructions.sh [case-regexp]   (from the repository root)
#
# Each case runs twice, at 1 and at 4 iterations, counting only inside the
# step function (stepTarget or stepAssign); the difference divided by 3 is
# the steady cost of one step, without what only a first call pays. GOGC=off
# keeps collections out of the step (the benchmark collects, untimed, before
# each one); gcshrinkstackoff keeps a stack grown once grown; callgrind
# aborts on Go's preemption signals, hence asyncpreemptoff and one thread.
set -euo pipefail
filter=${1:-.}
bin=$(mktemp -d)/assign.test
go test -c -o "$bin" ./assign
cd assign

count() { # case, step function, benchtime → instructions
	local out
	out=$(mktemp)
	GOGC=off GODEBUG=asyncpreemptoff=1,gcshrinkstackoff=1 GOMAXPROCS=1 \
		valgrind --tool=callgrind --callgrind-out-file="$out" \
		--toggle-collect="github.com/groupd/groupd/assign.$2" \
		"$bin" -test.run '^$' -test.bench "BenchmarkTarget/$1\$" -test.benchtime "$3" >"$out.log" 2>&1
	grep -q '^PASS' "$out.log" || { echo "$1 failed:" >&2; tail -5 "$out.log" >&2; exit 1; }
	grep -o 'refs: *[0-9,]*' "$out.log" | tr -d ', ' | cut -d: -f2
	rm -f "$out" "$out.log"
}

for as in uniform range; do
	for shape in homogeneous-10000m-500k heterogeneous-10000m-100k; do
		cases="$as/$shape/full/assign"
		for change in join leave grow; do
			cases+=" $as/$shape/$change/target $as/$shape/$change/assign"
		done
		for c in $cases; do
			[[ $c =~ $filter ]] || continue
			step=stepAssign
			[[ $c == */target ]] && step=stepTarget
			one=$(count "$c" $step 1x)
			four=$(count "$c" $step 4x)
			echo "$c $(((four - one) / 3))"
		done
	done
done
