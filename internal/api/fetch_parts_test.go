package api

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupd/groupd/internal/fetchsession"
)

// TestRequestPartsNamesEachOnce checks requestParts against the plain
// rule on random requests, with and without repeated topics and
// partitions and with partition numbers beyond mayRepeat's bitmap: each
// partition once, where it was first named, with the last entry's
// parameters.
func TestRequestPartsNamesEachOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	var buf []fetchsession.Part
	repeats := 0
	for round := range 2000 {
		req := kmsg.NewPtrFetchRequest()
		for range 1 + rng.IntN(12) {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = fmt.Sprint("t", rng.IntN(14))
			for range rng.IntN(20) {
				rp := kmsg.NewFetchRequestTopicPartition()
				switch rng.IntN(20) {
				case 0:
					rp.Partition = 1<<16 + rng.Int32N(3)
				case 1:
					rp.Partition = -1
				default:
					rp.Partition = rng.Int32N(150)
				}
				rp.FetchOffset = rng.Int64()
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		var want []fetchsession.Part
		at := map[fetchsession.Key]int{}
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				k := fetchsession.Key{Topic: rt.Topic, Partition: rp.Partition}
				params := fetchsession.Params{FetchOffset: rp.FetchOffset, LogStartOffset: rp.LogStartOffset, MaxBytes: rp.PartitionMaxBytes,
					CurrentLeaderEpoch: rp.CurrentLeaderEpoch, LastFetchedEpoch: rp.LastFetchedEpoch}
				if i, ok := at[k]; ok {
					want[i].Params = params
					continue
				}
				at[k] = len(want)
				want = append(want, fetchsession.Part{Key: k, Params: params})
			}
		}
		buf = requestParts(req, buf)
		if !slices.Equal(buf, want) {
			t.Fatalf("round %d: got %v, want %v", round, buf, want)
		}
		if mayRepeat(req) {
			repeats++
		} else if len(want) != len(buf) {
			t.Fatalf("round %d: mayRepeat missed a repeat", round)
		}
	}
	if repeats == 0 || repeats == 2000 {
		t.Fatalf("mayRepeat said yes %d times in 2000: the test covers one path only", repeats)
	}
}
