package cli

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// topicSpec is one --topic argument: a topic and, optionally, some of its
// partitions (none means all of them).
type topicSpec struct {
	topic      string
	partitions []int32
}

// parseTopicSpecs reads repeated `--topic t` or `--topic t:p,p,...`
// arguments, merging repeats of one topic. A topic named once without
// partitions stands for all of its partitions, whatever else names it.
func parseTopicSpecs(args []string) ([]topicSpec, error) {
	var specs []topicSpec
	index := map[string]int{}
	all := map[string]bool{}
	for _, a := range args {
		topic, parts, hasParts := strings.Cut(a, ":")
		if topic == "" {
			return nil, fmt.Errorf("--topic %q: no topic name", a)
		}
		var ps []int32
		if hasParts {
			for p := range strings.SplitSeq(parts, ",") {
				n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("--topic %q: partition %q is not a partition number", a, p)
				}
				ps = append(ps, int32(n))
			}
		}
		i, seen := index[topic]
		if !seen {
			i = len(specs)
			index[topic] = i
			specs = append(specs, topicSpec{topic: topic})
		}
		if !hasParts {
			all[topic] = true
		}
		specs[i].partitions = append(specs[i].partitions, ps...)
	}
	for i := range specs {
		if all[specs[i].topic] {
			specs[i].partitions = nil
			continue
		}
		slices.Sort(specs[i].partitions)
		specs[i].partitions = slices.Compact(specs[i].partitions)
	}
	return specs, nil
}

// parseDateTime reads --to-datetime as kafka-consumer-groups.sh does:
// YYYY-MM-DDTHH:mm:SS with optional fractional seconds and an optional
// zone (Z or ±hh:mm); without a zone the time is in loc.
func parseDateTime(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse("2006-01-02T15:04:05.999999999Z07:00", s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05.999999999", s, loc); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--to-datetime %q: want YYYY-MM-DDTHH:mm:SS[.sss][Z|±hh:mm], such as 2026-11-30T10:00:00Z", s)
}

var isoDuration = regexp.MustCompile(`^(?i)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d{1,9}))?S)?)?$`)

// parseBackDuration reads --by-duration: an ISO-8601 duration of the form
// kafka-consumer-groups.sh takes (PnDTnHnMnS, such as P1DT2H or PT30M)
// or a Go duration (90m, 1h30m). It must not be negative: it counts
// back from now.
func parseBackDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("--by-duration %q: want PnDTnHnMnS (such as P1DT2H or PT30M) or a duration such as 90m", s)
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return 0, fmt.Errorf("--by-duration %q: must not be negative", s)
		}
		return d, nil
	}
	m := isoDuration.FindStringSubmatch(s)
	if m == nil || strings.HasSuffix(strings.ToUpper(s), "T") || len(s) == 1 {
		return 0, bad
	}
	var total float64 // seconds; float so that overflow is detected, not wrapped
	for i, unit := range []float64{86400, 3600, 60, 1} {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil {
			return 0, bad
		}
		total += float64(n) * unit
	}
	if total > math.MaxInt64/float64(time.Second) {
		return 0, fmt.Errorf("--by-duration %q: too long", s)
	}
	d := time.Duration(total) * time.Second
	if m[5] != "" {
		frac := m[5] + strings.Repeat("0", 9-len(m[5]))
		ns, _ := strconv.ParseInt(frac, 10, 64)
		d += time.Duration(ns)
	}
	return d, nil
}

// parseConfigs reads repeated --config k=v.
func parseConfigs(args []string) (map[string]*string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	configs := make(map[string]*string, len(args))
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--config %q: want NAME=VALUE", a)
		}
		configs[k] = &v
	}
	return configs, nil
}

// groupStates are the group states Kafka names (classic and consumer
// groups), as ListGroups reports them.
var groupStates = []string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Assigning", "Reconciling", "NotReady", "Unknown"}

// canonicalStates reads --state filters case-insensitively, as
// kafka-consumer-groups.sh does, into the names the brokers report.
func canonicalStates(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		a = strings.TrimSpace(a)
		i := slices.IndexFunc(groupStates, func(s string) bool { return strings.EqualFold(s, a) })
		if i < 0 {
			return nil, fmt.Errorf("--state %q: not a group state (%s)", a, strings.Join(groupStates, ", "))
		}
		out = append(out, groupStates[i])
	}
	return out, nil
}
