package cli

import (
	"math"
	"strings"
	"testing"
)

func TestPlanReset(t *testing.T) {
	// b/0 is listed first to show the plan comes out sorted. Each
	// partition's log holds [start, end).
	parts := []partitionState{
		{topic: "b", partition: 0, start: 0, end: 10, committed: 4, atTime: 6},
		{topic: "a", partition: 1, start: 5, end: 8, committed: -1, atTime: 8},
		{topic: "a", partition: 0, start: 2, end: 20, committed: 15, atTime: 2},
	}
	type row struct {
		topic     string
		partition int32
		offset    int64
	}
	for _, tc := range []struct {
		name     string
		target   resetTarget
		want     []row
		warnings int
		err      string
	}{
		{"earliest", resetTarget{kind: toEarliest}, []row{{"a", 0, 2}, {"a", 1, 5}, {"b", 0, 0}}, 0, ""},
		{"latest", resetTarget{kind: toLatest}, []row{{"a", 0, 20}, {"a", 1, 8}, {"b", 0, 10}}, 0, ""},
		{"offset in range everywhere", resetTarget{kind: toOffset, offset: 6}, []row{{"a", 0, 6}, {"a", 1, 6}, {"b", 0, 6}}, 0, ""},
		// 12 is past a/1's end and b/0's end: clamped with a warning each.
		{"offset clamped to end", resetTarget{kind: toOffset, offset: 12}, []row{{"a", 0, 12}, {"a", 1, 8}, {"b", 0, 10}}, 2, ""},
		{"offset clamped to start", resetTarget{kind: toOffset, offset: 1}, []row{{"a", 0, 2}, {"a", 1, 5}, {"b", 0, 1}}, 2, ""},
		{"time", resetTarget{kind: toTime}, []row{{"a", 0, 2}, {"a", 1, 8}, {"b", 0, 6}}, 0, ""},
		{"shift needs a commit", resetTarget{kind: shiftBy, shift: 1}, nil, 0, "a/1 has no committed offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, warnings, err := planReset(tc.target, parts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(plan) != len(tc.want) {
				t.Fatalf("plan %+v, want %+v", plan, tc.want)
			}
			for i, w := range tc.want {
				if p := plan[i]; p.Topic != w.topic || p.Partition != w.partition || p.NewOffset != w.offset {
					t.Errorf("row %d: %+v, want %+v", i, p, w)
				}
			}
			if len(warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", warnings, tc.warnings)
			}
		})
	}

	committed := []partitionState{
		{topic: "a", partition: 0, start: 2, end: 20, committed: 15},
		{topic: "b", partition: 0, start: 0, end: 10, committed: 4},
	}
	for _, tc := range []struct {
		shift int64
		want  [2]int64
	}{
		{-3, [2]int64{12, 1}},
		{3, [2]int64{18, 7}},
		{-100, [2]int64{2, 0}},
		{100, [2]int64{20, 10}},
		// Overflowing shifts saturate at the ends instead of wrapping.
		{math.MaxInt64, [2]int64{20, 10}},
		{math.MinInt64, [2]int64{2, 0}},
	} {
		plan, _, err := planReset(resetTarget{kind: shiftBy, shift: tc.shift}, committed)
		if err != nil {
			t.Fatalf("shift %d: %v", tc.shift, err)
		}
		if got := [2]int64{plan[0].NewOffset, plan[1].NewOffset}; got != tc.want {
			t.Errorf("shift %d: %v, want %v", tc.shift, got, tc.want)
		}
		if plan[0].Current != 15 || plan[1].Current != 4 {
			t.Errorf("shift %d: current offsets %d, %d", tc.shift, plan[0].Current, plan[1].Current)
		}
	}
}
