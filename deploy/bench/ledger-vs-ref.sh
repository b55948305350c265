#!/usr/bin/env bash
# ledger-vs-ref.sh — `sluice bench ledger` of this tree against a pinned
# reference build, run alternately on the same machine, printed as JSON.
#
# Why alternately: on a shared or loaded machine the speed of one core moves
# by tens of percent within a minute; running A, B, A, B, … and comparing the
# medians of each side lets both see the same weather. Why a pinned build:
# the target of issue 25 is relative ("at least as fast as the turn-2 build
# 5361ece"), so the reference must be rebuilt from that commit, not taken
# from a number written down on another machine.
#
# Both the medians and the best runs are printed: on a loaded machine a
# run is slowed by whatever else holds the core, so the best run of each
# side is the better estimate of its own speed, and the median says how
# often that holds.
#
# CPU time (user + system, from /usr/bin/time) is printed too: it does not
# count the time a run waited for a core, so on a loaded machine its ratio
# (ratio_cpu_median) is the steadier one.
#
# Usage: deploy/bench/ledger-vs-ref.sh            (REF=5361ece ROUNDS=7 N=2000000)
#        REF=<commit> ROUNDS=9 deploy/bench/ledger-vs-ref.sh
# Needs: go, git, jq, /usr/bin/time. The reference is built once into bin/ref/<sha>/ from a
# `git worktree` (removed afterwards) and reused by later runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
REF=${REF:-5361ece}
ROUNDS=${ROUNDS:-7}
N=${N:-2000000}
GO=${GO:-go}

sha=$(git rev-parse --verify "$REF^{commit}")
refbin=bin/ref/$sha/sluice
if [[ ! -x $refbin ]]; then
	wt=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ref-XXXXXX")
	git worktree add --detach "$wt" "$sha" >/dev/null 2>&1
	mkdir -p "bin/ref/$sha"
	(cd "$wt" && $GO build -o "$OLDPWD/$refbin" ./services/sluice)
	git worktree remove --force "$wt"
fi
$GO build -o bin/sluice ./services/sluice

cpu() { # cpu BIN N → user+system CPU seconds of `BIN bench ledger -n N`
	local t
	t=$( { /usr/bin/time -f "%U %S" "$1" bench ledger -n "$2" >/dev/null; } 2>&1 | tail -1)
	awk '{print $1 + $2}' <<<"$t"
}
run() { # run BIN → decisions/s (wall), allocs/decision, and CPU-time decisions/s
	# Wall time counts the time the process waited for a core; on a
	# loaded machine that is most of the noise. CPU time does not: the
	# CPU of N pairs less that of 1 pair (which cancels the start-up and
	# the state-size measurement every run also makes) per decision.
	local j c1 cn
	j=$("$1" bench ledger -n "$N" | jq -c '{d: .decisions_per_sec, a: .allocs_per_decision, n: .decisions}')
	cn=$(cpu "$1" "$N")
	c1=$(cpu "$1" 1)
	jq -c --argjson cn "$cn" --argjson c1 "$c1" '. + {c: (if $cn > $c1 then (.n / ($cn - $c1)) else 0 end)}' <<<"$j"
}
cur=() ref=() allocs=() curc=() refc=()
for ((i = 0; i < ROUNDS; i++)); do
	# Alternate which side goes first so that neither always gets the
	# cooler (or hotter) half of a round.
	if ((i % 2 == 0)); then
		c=$(run bin/sluice); r=$(run "$refbin")
	else
		r=$(run "$refbin"); c=$(run bin/sluice)
	fi
	cur+=("$(jq .d <<<"$c")") ref+=("$(jq .d <<<"$r")") allocs+=("$(jq .a <<<"$c")")
	curc+=("$(jq .c <<<"$c")") refc+=("$(jq .c <<<"$r")")
	echo "round $((i + 1))/$ROUNDS: current $(jq .d <<<"$c") ref $(jq .d <<<"$r") decisions/s (wall); $(jq .c <<<"$c") / $(jq .c <<<"$r") per CPU-second" >&2
done
jq -n --arg refsha "$sha" --arg head "$(git rev-parse HEAD)" --arg dirty "$(git status --porcelain --untracked-files=no | head -c 1)" \
	--arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --argjson rounds "$ROUNDS" --argjson n "$N" \
	--argjson cur "$(printf '%s\n' "${cur[@]}" | jq -s .)" --argjson ref "$(printf '%s\n' "${ref[@]}" | jq -s .)" \
	--argjson allocs "$(printf '%s\n' "${allocs[@]}" | jq -s .)" \
	--argjson curc "$(printf '%s\n' "${curc[@]}" | jq -s .)" --argjson refc "$(printf '%s\n' "${refc[@]}" | jq -s .)" '
	def median: sort | if length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
	{bench: "ledger-vs-ref", reference: $refsha, head: $head, head_dirty: ($dirty != ""), rounds: $rounds, pairs_per_run: $n,
	 loadavg: $load,
	 current_decisions_per_sec: $cur, reference_decisions_per_sec: $ref,
	 current_median: ($cur | median), reference_median: ($ref | median),
	 ratio_median: (($cur | median) / ($ref | median)),
	 current_best: ($cur | max), reference_best: ($ref | max),
	 ratio_best: (($cur | max) / ($ref | max)),
	 ratio_per_round: [range(0; $rounds) as $i | $cur[$i] / $ref[$i]],
	 current_decisions_per_cpu_second: $curc, reference_decisions_per_cpu_second: $refc,
	 ratio_cpu_median: (($curc | median) / ($refc | median)),
	 current_allocs_per_decision_max: ($allocs | max)}'
