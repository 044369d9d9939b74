package partition

import (
	"strings"
	"testing"
)

// TestCheckpointVersion3: the high watermark and a truncation in progress
// round-trip; impossible combinations are refused.
func TestCheckpointVersion3(t *testing.T) {
	for _, c := range []checkpoint{
		{logStart: 3, recoveryPoint: 90, hw: 80, hasHW: true},
		{logStart: 3, recoveryPoint: 40, truncating: true, truncateTo: 50},
		{logStart: 50, recoveryPoint: 50, hw: 7, hasHW: true, truncating: true, truncateTo: 50, truncateFull: true, gaps: []offsetRange{{60, 70}}},
	} {
		raw := c.encode()
		if raw[4] != 3 {
			t.Fatalf("%+v written as version %d", c, raw[4])
		}
		got, err := decodeCheckpoint(raw)
		c.hasHW = true
		if err != nil || !got.equal(c) {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
	for _, c := range []checkpoint{
		{logStart: 3, recoveryPoint: 60, truncating: true, truncateTo: 50}, // recovery point past it
		{logStart: 60, recoveryPoint: 60, truncating: true, truncateTo: 50},
		{logStart: 3, recoveryPoint: 40, truncating: true, truncateTo: 50, truncateFull: true},
		{logStart: 3, recoveryPoint: 40, hw: -2, hasHW: true},
	} {
		if got, err := decodeCheckpoint(c.encode()); err == nil {
			t.Errorf("%+v accepted as %+v", c, got)
		}
	}
	if !strings.Contains(string(checkpoint{}.encode()[:5]), "GDRC\x02") {
		t.Fatal("a checkpoint without a high watermark is not version 2")
	}
}
