package cli

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTopicSpecs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []topicSpec
		err  string
	}{
		{args: []string{"a"}, want: []topicSpec{{topic: "a"}}},
		{args: []string{"a:2,0,1"}, want: []topicSpec{{"a", []int32{0, 1, 2}}}},
		{args: []string{"a:1", "b", "a:0,1"}, want: []topicSpec{{"a", []int32{0, 1}}, {topic: "b"}}},
		// A whole topic wins over some of its partitions.
		{args: []string{"a:1", "a"}, want: []topicSpec{{topic: "a"}}},
		{args: []string{"my.topic-1_x:3"}, want: []topicSpec{{"my.topic-1_x", []int32{3}}}},
		{args: []string{":1"}, err: "no topic name"},
		{args: []string{"a:"}, err: "not a partition number"},
		{args: []string{"a:x"}, err: "not a partition number"},
		{args: []string{"a:-1"}, err: "not a partition number"},
		{args: []string{"a:1,,2"}, err: "not a partition number"},
	} {
		got, err := parseTopicSpecs(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

func TestParseDateTime(t *testing.T) {
	loc := time.FixedZone("test", 3*3600)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2026-11-30T10:00:00", time.Date(2026, 11, 30, 10, 0, 0, 0, loc)},
		{"2026-11-30T10:00:00.250", time.Date(2026, 11, 30, 10, 0, 0, 250e6, loc)},
		{"2026-11-30T10:00:00Z", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
		{"2026-11-30T10:00:00.000Z", time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
		{"2026-11-30T10:00:00+02:00", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)},
		{"2026-11-30T10:00:00.5-01:30", time.Date(2026, 11, 30, 11, 30, 0, 500e6, time.UTC)},
	} {
		got, err := parseDateTime(tc.in, loc)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "2026-11-30", "2026-11-30 10:00:00", "yesterday", "2026-13-01T00:00:00Z", "2026-11-30T10:00:00+2"} {
		if _, err := parseDateTime(bad, loc); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

func TestParseBackDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"PT30M", 30 * time.Minute},
		{"P1DT2H", 26 * time.Hour},
		{"P2D", 48 * time.Hour},
		{"PT1H2M3S", time.Hour + 2*time.Minute + 3*time.Second},
		{"PT0.5S", 500 * time.Millisecond},
		{"pt1.000000001s", time.Second + 1},
		{"PT0S", 0},
		{"90m", 90 * time.Minute},
		{"1h30m", 90 * time.Minute},
	} {
		got, err := parseBackDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "P", "PT", "P1DT", "P1H", "PT1D", "1d", "-PT1H", "-5m", "PT1.5M", "P106751DT23H47M17S", "P99999999999999D"} {
		if d, err := parseBackDuration(bad); err == nil {
			t.Errorf("%q: parsed as %v", bad, d)
		}
	}
}

func TestParseConfigs(t *testing.T) {
	got, err := parseConfigs([]string{"retention.ms=1000", "cleanup.policy=compact,delete", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"retention.ms": "1000", "cleanup.policy": "compact,delete", "empty": ""}
	if len(got) != len(want) {
		t.Fatalf("got %d configs, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] == nil || *got[k] != v {
			t.Errorf("%s: got %v, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{"novalue", "=x"} {
		if _, err := parseConfigs([]string{bad}); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

func TestCanonicalStates(t *testing.T) {
	got, err := canonicalStates([]string{"stable", "EMPTY", "preparingrebalance"})
	if err != nil || !reflect.DeepEqual(got, []string{"Stable", "Empty", "PreparingRebalance"}) {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := canonicalStates([]string{"running"}); err == nil {
		t.Error("unknown state accepted")
	}
}
