package broker

import (
	"cmp"
	"errors"
	"fmt"
	"github.com/groupd/groupd/internal/datadir"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/groupd/groupd/internal/partition"
)

// RecoverOptions configure Recover.
type RecoverOptions struct {
	DataDir string
	// Force rebuilds meta.json even if it is present and readable.
	Force bool
	// AdoptUnknown adopts topic directories without a readable descriptor
	// as topics named "recovered-<id>"; without it Recover names them and
	// writes nothing.
	AdoptUnknown bool
	// ClusterID, if set, is the cluster id to write; otherwise it comes
	// from the old meta.json if readable, else from the descriptors.
	ClusterID string
	// Out receives the report.
	Out io.Writer
}

// ProducerIDMargin is added to the highest producer id found in the logs
// when meta.json is lost: ids handed out to producers that never wrote a
// batch are not in the logs, and a reused producer id would make the
// broker answer a new producer with another's sequence state. Producer ids
// are 63-bit, so skipping four billion costs nothing.
const ProducerIDMargin = 1 << 32

// Recover rebuilds meta.json from the topic directories under logs/: each
// topic's name, id, partition count and configs come from its descriptor
// (logs/<id>/topic.json), the cluster id from the descriptors, and the
// producer-id limit from the highest producer id in any batch header plus
// ProducerIDMargin. It reads the partition logs without changing them and
// reports what it found; it writes nothing if a directory cannot be
// accounted for (no descriptor without AdoptUnknown, two directories
// claiming one name, a missing partition), naming each. Pending removals
// in a readable old meta.json are kept, except removals of partitions (a
// CreatePartitions that did not commit) whose directories are all there:
// those are dropped and the partitions kept, so that the next start does
// not remove them and then refuse to start without them (with one of them
// missing, the removal is kept if the others hold no records, see
// pendingPartitions). An old meta.json
// is kept beside the new one as meta.json.bak-<time>.
func Recover(opts RecoverOptions) error {
	// Never under a running groupd: its logs and metadata are moving.
	if _, err := os.Stat(opts.DataDir); err != nil {
		return err
	}
	lock, err := datadir.Acquire(opts.DataDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	metaPath := filepath.Join(opts.DataDir, metaName)
	old, haveOld, oldErr := readMeta(opts.DataDir)
	if _, err := os.Stat(metaPath); err == nil || !errors.Is(err, os.ErrNotExist) {
		switch {
		case oldErr == nil && !opts.Force:
			return fmt.Errorf("%s is present and readable, and groupd starts from it; use --force to rebuild it from the partition directories anyway (the current file is kept as a backup)", metaPath)
		case oldErr != nil:
			fmt.Fprintf(out, "%s is unreadable (%v); rebuilding it from the partition directories\n", metaPath, oldErr)
			haveOld = false
		default:
			fmt.Fprintf(out, "%s is readable; rebuilding it anyway (--force)\n", metaPath)
		}
	} else {
		fmt.Fprintf(out, "%s is missing; rebuilding it from the partition directories\n", metaPath)
	}

	// Removals recorded in a readable old file are kept: their
	// directories are not topics to bring back. Removals of partitions
	// that the directories contradict are dropped (pendingPartitions).
	removed := map[string]bool{}
	var removals []removal
	// dropped are the removals of partitions that the directories
	// contradict (see pendingPartitions), by index in removals.
	dropped := map[int]bool{}
	oldTopics := map[string]topicMeta{}
	if haveOld {
		for _, t := range old.Topics {
			oldTopics[t.ID] = t
		}
		for _, r := range old.PendingRemovals {
			removals = append(removals, r)
			if r.FromPartition == 0 {
				removed[r.ID] = true
			}
		}
	}

	logsDir := filepath.Join(opts.DataDir, logsDirName)
	ents, err := os.ReadDir(logsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var (
		problems  []string
		topics    []topicMeta
		byName    = map[string]string{}
		clusterOf = map[string]int{}
		maxPID    = int64(-1)
	)
	for _, e := range ents {
		path := filepath.Join(logsDir, e.Name())
		id, ok := parseTopicID(e.Name())
		if !ok || !e.IsDir() {
			problems = append(problems, fmt.Sprintf("%s: not a topic directory (named by a 32-digit hex topic id); move it out of %s", path, logsDir))
			continue
		}
		if removed[e.Name()] {
			fmt.Fprintf(out, "%s: removal recorded in the old %s; left for the next start to remove\n", path, metaName)
			continue
		}
		tm := topicMeta{ID: id.String()}
		d, derr := readDescriptor(path)
		switch {
		case derr == nil && d.ID == tm.ID && ValidateTopicName(d.Name) == nil:
			tm.Name, tm.Partitions, tm.Configs = d.Name, d.Partitions, d.Configs
			if d.ClusterID != "" {
				clusterOf[d.ClusterID]++
			}
		case oldTopics[tm.ID].Name != "":
			o := oldTopics[tm.ID]
			tm.Name, tm.Partitions, tm.Configs = o.Name, o.Partitions, o.Configs
			fmt.Fprintf(out, "%s: no usable %s (%v); topic %q as the old %s lists it\n", path, descriptorName, describeErr(derr, d, tm.ID), tm.Name, metaName)
		case opts.AdoptUnknown:
			tm.Name = "recovered-" + tm.ID
			fmt.Fprintf(out, "%s: no usable %s (%v); adopting it as topic %q\n", path, descriptorName, describeErr(derr, d, tm.ID), tm.Name)
		default:
			problems = append(problems, fmt.Sprintf("%s: no usable %s (%v); adopt it with --adopt-unknown (as topic \"recovered-%s\") or move it out of %s", path, descriptorName, describeErr(derr, d, tm.ID), tm.ID, logsDir))
			continue
		}
		parts, other, err := partitionDirs(path)
		if err != nil {
			return err
		}
		recorded := tm.Partitions // by the descriptor or the old file
		for p := range parts {
			tm.Partitions = max(tm.Partitions, p+1)
		}
		for i, r := range removals {
			if r.ID != tm.ID || r.FromPartition == 0 {
				continue
			}
			keep, problem, err := pendingPartitions(out, path, &tm, recorded, parts, r)
			if err != nil {
				return err
			}
			if problem != "" {
				problems = append(problems, problem)
			}
			if !keep {
				dropped[i] = true
			}
		}
		if len(other) > 0 {
			problems = append(problems, fmt.Sprintf("%s: unexpected entries %s; move them out", path, strings.Join(other, ", ")))
		}
		fmt.Fprintf(out, "%s: topic %q, %d partitions\n", path, tm.Name, tm.Partitions)
		for p := range tm.Partitions {
			pdir := filepath.Join(path, strconv.Itoa(int(p)))
			if !parts[p] {
				problems = append(problems, fmt.Sprintf("%s: partition %d of topic %q is missing; restore it, or create it empty (mkdir) to accept that its records are lost", pdir, p, tm.Name))
				continue
			}
			sv, err := partition.SurveyDir(pdir)
			if err != nil {
				return fmt.Errorf("reading %s: %w", pdir, err)
			}
			maxPID = max(maxPID, sv.MaxProducerID)
			fmt.Fprintf(out, "  partition %d: %d segments, offsets %d to %d, recovery point %d, highest producer id %d\n",
				p, sv.Segments, sv.StartOffset, sv.EndOffset, sv.RecoveryPoint, sv.MaxProducerID)
			for _, pr := range sv.Problems {
				fmt.Fprintf(out, "    damage (the start refuses it unless --quarantine-damaged-segments): %s\n", pr)
			}
		}
		if prev, ok := byName[tm.Name]; ok {
			problems = append(problems, fmt.Sprintf("%s and %s both hold topic %q; move one of them out of %s", filepath.Join(logsDir, prev), path, tm.Name, logsDir))
			continue
		}
		byName[tm.Name] = e.Name()
		topics = append(topics, tm)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(out, "problem:", p)
		}
		return fmt.Errorf("nothing was written: problems found (listed above): %d", len(problems))
	}

	m := metaFile{}
	for i, r := range removals {
		if !dropped[i] {
			m.PendingRemovals = append(m.PendingRemovals, r)
		}
	}
	if haveOld {
		m.OffsetsTopic, m.PendingOffsetCleanups = old.OffsetsTopic, old.PendingOffsetCleanups
	}
	switch {
	case opts.ClusterID != "":
		m.ClusterID = opts.ClusterID
		fmt.Fprintf(out, "cluster id: %s (given)\n", m.ClusterID)
	case haveOld:
		m.ClusterID = old.ClusterID
		fmt.Fprintf(out, "cluster id: %s (from the old %s)\n", m.ClusterID, metaName)
	case len(clusterOf) > 0:
		ids := slices.SortedFunc(maps.Keys(clusterOf), func(a, b string) int {
			return cmp.Or(cmp.Compare(clusterOf[b], clusterOf[a]), cmp.Compare(a, b))
		})
		m.ClusterID = ids[0]
		fmt.Fprintf(out, "cluster id: %s (from %d topic descriptors)\n", m.ClusterID, clusterOf[ids[0]])
		if len(ids) > 1 {
			fmt.Fprintf(out, "  the descriptors name %d cluster ids: %s; pass --cluster-id to choose another\n", len(ids), strings.Join(ids, ", "))
		}
	default:
		m.ClusterID = newClusterID()
		fmt.Fprintf(out, "cluster id: %s (new: no descriptor names one)\n", m.ClusterID)
	}
	if haveOld {
		m.ProducerIDLimit = max(old.ProducerIDLimit, maxPID+1)
		fmt.Fprintf(out, "producer id limit: %d (the old %s's, or above the highest producer id in the logs, %d)\n", m.ProducerIDLimit, metaName, maxPID)
	} else {
		m.ProducerIDLimit = maxPID + 1 + ProducerIDMargin
		fmt.Fprintf(out, "producer id limit: %d (highest producer id in the logs %d, plus a margin of %d for ids handed out but never used)\n", m.ProducerIDLimit, maxPID, int64(ProducerIDMargin))
	}
	slices.SortFunc(topics, func(a, b topicMeta) int { return strings.Compare(a.Name, b.Name) })
	m.Topics = topics
	if err := m.check(); err != nil {
		return fmt.Errorf("rebuilt metadata is inconsistent: %w", err)
	}
	if _, err := os.Stat(metaPath); err == nil {
		stamp := fmt.Sprintf("%s.bak-%s", metaPath, time.Now().UTC().Format("20060102T150405Z"))
		bak := stamp
		for n := 1; ; n++ {
			if _, err := os.Lstat(bak); errors.Is(err, os.ErrNotExist) {
				break
			}
			bak = fmt.Sprintf("%s.%d", stamp, n)
		}
		if err := os.Rename(metaPath, bak); err != nil {
			return err
		}
		fmt.Fprintf(out, "kept the old %s as %s\n", metaName, bak)
	}
	if err := writeMeta(opts.DataDir, m); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s with %d topics\n", metaPath, len(topics))
	return nil
}

func describeErr(err error, d descriptor, id string) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "missing"
	case err != nil:
		return err.Error()
	case d.ID != id:
		return fmt.Sprintf("it names id %q", d.ID)
	}
	return fmt.Sprintf("bad topic name %q", d.Name)
}

// pendingPartitions decides what becomes of r, a removal recorded in the
// old meta.json of topic tm's partitions from r.FromPartition on: a
// CreatePartitions that did not commit. It records the removal, opens
// (creates) the new partitions one by one, writes the descriptor (which
// makes their directory entries durable) and commits by writing meta.json
// without the removal. Keeping the removal where the directories exist
// would have the next start remove them and then refuse to start without
// them, so:
//
//   - no directory from r.FromPartition on: kept, nothing to remove;
//   - every directory up to the highest one present: dropped, and the
//     partitions are kept and served (they exist; nothing is deleted);
//   - one missing below another (its entry was lost before the
//     descriptor was written, so the creation never committed): kept,
//     with tm cut back to r.FromPartition partitions for the next start
//     to remove the others, if they hold no records; else a problem.
//
// recorded is the partition count the descriptor (or the old file) gave.
// It reports each decision to out.
func pendingPartitions(out io.Writer, path string, tm *topicMeta, recorded int32, parts map[int32]bool, r removal) (keep bool, problem string, err error) {
	from := r.FromPartition
	what := fmt.Sprintf("the pending removal of partitions %d and up of topic %q (%s) recorded in the old %s", from, tm.Name, r.Reason, metaName)
	if tm.Partitions <= from {
		fmt.Fprintf(out, "%s: kept %s: no partition directory from %d on, nothing to remove\n", path, what, from)
		return true, "", nil
	}
	missing := int32(-1)
	for p := from; p < tm.Partitions; p++ {
		if !parts[p] {
			missing = p
			break
		}
	}
	if missing < 0 {
		fmt.Fprintf(out, "%s: dropped %s: the directories of partitions %d to %d are all present, so they are kept and served\n", path, what, from, tm.Partitions-1)
		return false, "", nil
	}
	if recorded > from {
		// The descriptor counts the new partitions: they were all made
		// durable, and one is missing since. Reported as missing below.
		return true, "", nil
	}
	for p := from; p < tm.Partitions; p++ {
		if !parts[p] {
			continue
		}
		pdir := filepath.Join(path, strconv.Itoa(int(p)))
		sv, err := partition.SurveyDir(pdir)
		if err != nil {
			return true, "", fmt.Errorf("reading %s: %w", pdir, err)
		}
		if sv.EndOffset > 0 || len(sv.Problems) > 0 {
			return true, fmt.Sprintf("%s: partition %d of topic %q is missing, but partition %d holds records (offsets %d to %d, %d problems), so %s cannot be finished; restore partition %d, or create it empty (mkdir) to accept that its records are lost",
				filepath.Join(path, strconv.Itoa(int(missing))), missing, tm.Name, p, sv.StartOffset, sv.EndOffset-1, len(sv.Problems), what, missing), nil
		}
	}
	fmt.Fprintf(out, "%s: kept %s: partition %d's directory is missing, so the creation never finished; the other new partitions (up to %d) hold no records and the next start removes them\n",
		path, what, missing, tm.Partitions-1)
	tm.Partitions = from
	return true, "", nil
}
