// Package cli holds the operator commands of the groupd binary: `groupd
// groups ...`, `groupd topics ...` and `groupd cluster ...`. They speak only the Kafka protocol
// (through franz-go's kadm), so they work against groupd and against any
// Kafka cluster, and follow kafka-consumer-groups.sh and kafka-topics.sh
// where those tools set an expectation. The one exception is `groupd groups
// rebalances`, which reads groupd's HTTP admin API, since Kafka keeps no
// rebalance history.
//
// Every command prints an aligned table by default and JSON with
// `--output json`, and ends with an error that ExitCode maps to the exit
// status scripts see: 0 success, 1 an operational failure (the broker
// refused or could not be reached), 2 a usage error.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exit statuses.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// UsageError is a command line the command cannot run: a missing or
// unknown argument or flag, or flags that contradict each other.
type UsageError struct {
	msg  string
	path string // the command's path, for the --help hint
}

func (e *UsageError) Error() string {
	if e.path == "" {
		return e.msg
	}
	return fmt.Sprintf("%s\nRun '%s --help' for usage.", e.msg, e.path)
}

func usageErr(cmd *cobra.Command, format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...), path: cmd.CommandPath()}
}

// ExitCode maps an error returned by the commands (or by cobra while
// parsing them) to the process exit status: 0 for nil, 2 for a usage
// error, 1 for anything else.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if _, ok := errors.AsType[*UsageError](err); ok {
		return ExitUsage
	}
	return ExitError
}

// flagError turns cobra's flag parsing errors (unknown flag, bad value)
// into usage errors.
func flagError(cmd *cobra.Command, err error) error {
	return usageErr(cmd, "%v", err)
}

// exactArgs is cobra.ExactArgs with a usage error that names the
// arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) && len(names) == 0 {
			return usageErr(cmd, "%s takes no arguments (got %d): %q", cmd.Name(), len(args), args)
		}
		if len(args) != len(names) {
			return usageErr(cmd, "%s takes %s (got %d argument(s))", cmd.Name(), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErr(cmd, "%s needs %s", cmd.Name(), what)
		}
		return nil
	}
}

// parentRun makes a command that only groups subcommands answer an
// unknown subcommand with a usage error instead of cobra's silent help.
func parentRun(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr(cmd, "unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// options are the flags every command shares.
type options struct {
	bootstrap string
	timeout   time.Duration
	output    string
	adminAddr string
	// now is the clock --by-duration counts back from; tests replace it.
	now func() time.Time
}

func newOptions() *options { return &options{now: time.Now} }

func (o *options) addFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.bootstrap, "bootstrap-server", "127.0.0.1:9092", "HOST:PORT of a broker to connect to (several: comma-separated)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up when the brokers have not answered within this time")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if o.output != "table" && o.output != "json" {
			return usageErr(cmd, "--output must be table or json, not %q", o.output)
		}
		if o.timeout <= 0 {
			return usageErr(cmd, "--timeout must be positive")
		}
		if len(o.seeds()) == 0 {
			return usageErr(cmd, "--bootstrap-server is empty")
		}
		return nil
	}
	cmd.SetFlagErrorFunc(flagError)
}

func (o *options) json() bool { return o.output == "json" }

func (o *options) seeds() []string {
	var s []string
	for _, a := range strings.Split(o.bootstrap, ",") {
		if a = strings.TrimSpace(a); a != "" {
			s = append(s, a)
		}
	}
	return s
}

// clusterConn is one command's connection to the cluster, bounded by
// --timeout.
type clusterConn struct {
	ctx context.Context
	adm *kadm.Client
	// cl is the client under adm, for the requests kadm does not make
	// as the command needs (a listing of every reassignment).
	cl     *kgo.Client
	cancel func()
}

func (o *options) connect(cmd *cobra.Command) (*clusterConn, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.seeds()...), kgo.ClientID("groupd-cli"))
	if err != nil {
		return nil, usageErr(cmd, "--bootstrap-server: %v", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	return &clusterConn{ctx: ctx, adm: kadm.NewClient(cl), cl: cl, cancel: func() { cancel(); cl.Close() }}, nil
}

func (s *clusterConn) close() { s.cancel() }

// connected makes a command's RunE that runs fn with a connection to the
// cluster. The client dials on its first request, so usage checks at the
// top of fn still come before anything is sent.
func (o *options) connected(fn func(cmd *cobra.Command, args []string, s *clusterConn) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, err := o.connect(cmd)
		if err != nil {
			return err
		}
		defer s.close()
		return fn(cmd, args, s)
	}
}

// OpError is a failed operation: what was being done, the error (a kerr
// error where the broker answered one), and what the operator can do
// about it.
type OpError struct {
	Op   string
	Err  error
	Hint string
}

func (e *OpError) Error() string {
	msg := e.Op + ": " + e.Err.Error()
	if e.Hint != "" {
		msg += "\n" + e.Hint
	}
	return msg
}

func (e *OpError) Unwrap() error { return e.Err }

// fail wraps err with the operation and a hint chosen from the Kafka error
// it carries, or from how the connection failed.
func (o *options) fail(op string, err error) error {
	if _, ok := errors.AsType[*OpError](err); ok {
		return err
	}
	return &OpError{Op: op, Err: err, Hint: o.hint(err)}
}

func (o *options) hint(err error) string {
	if _, ok := errors.AsType[*adminError](err); ok {
		return "" // it says what to check itself, and --bootstrap-server is not it
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("Nothing accepts connections at %s: is the broker running? Set its address with --bootstrap-server.", o.bootstrap)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("No answer within %s from %s: is a broker listening there? Check --bootstrap-server, or allow more time with --timeout.", o.timeout, o.bootstrap)
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return "Check the host name in --bootstrap-server."
	}
	ke, ok := errors.AsType[*kerr.Error](err)
	if !ok {
		return ""
	}
	switch ke {
	case kerr.GroupIDNotFound:
		return "List the groups with 'groupd groups list'."
	case kerr.NonEmptyGroup, kerr.UnknownMemberID, kerr.IllegalGeneration:
		return "The group has active members. Stop its consumers (or wait until their session timeout removes them) and try again."
	case kerr.GroupSubscribedToTopic:
		return "Active members of the group still consume this topic. Stop them, or change their subscription, first."
	case kerr.RebalanceInProgress:
		return "The group is rebalancing; try again once it is Stable or Empty."
	case kerr.CoordinatorNotAvailable, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress:
		return "The broker is loading or moving the group; try again shortly."
	case kerr.UnknownTopicOrPartition, kerr.UnknownTopicID:
		return "List the topics with 'groupd topics list'."
	case kerr.TopicAlreadyExists:
		return "Describe it with 'groupd topics describe', or delete it first."
	case kerr.InvalidReplicationFactor:
		return "A single groupd broker takes --replication-factor 1 (or -1 for the broker's default)."
	case kerr.InvalidReplicaAssignment:
		return "Name distinct brokers that are up: see the brokers with 'groupd topics describe' (REPLICAS) or your cluster's tools."
	case kerr.NoReassignmentInProgress:
		return "List the reassignments under way with 'groupd topics reassignments'."
	case kerr.PreferredLeaderNotAvailable:
		return "The preferred replica (the first of REPLICAS in 'groupd topics describe') must be up and in the ISR."
	case kerr.EligibleLeadersNotAvailable:
		return "No replica of the partition is up: start one of its brokers first."
	}
	return ""
}

// answer is the outcome of a command for one of the names it was given
// (a group or topic to delete, a topic to create).
type answer struct {
	name string
	err  error
	line string // what table output prints on success
	json any    // the name's object in JSON output
}

// answerErr is one name's error: the broker's, with its message, or that
// the broker left the name out of its answer.
func answerErr(answered bool, err error, msg string) error {
	switch {
	case !answered:
		return errors.New("the broker's answer left it out")
	case err != nil && msg != "":
		return fmt.Errorf("%w (%s)", err, msg)
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// report prints the answers (the successes' lines, or every answer in
// JSON) and returns the failures, each naming op and its name.
func (o *options) report(cmd *cobra.Command, op string, answers []answer) error {
	var failures []error
	objs := make([]any, 0, len(answers))
	for _, a := range answers {
		objs = append(objs, a.json)
		if a.err != nil {
			failures = append(failures, o.fail(fmt.Sprintf("%s %q", op, a.name), a.err))
		} else if !o.json() {
			fmt.Fprintln(cmd.OutOrStdout(), a.line)
		}
	}
	if o.json() {
		if err := writeJSON(cmd.OutOrStdout(), objs); err != nil {
			return err
		}
	}
	return errors.Join(failures...)
}

// writeTable prints rows under header, aligned in columns. Empty cells
// print as "-" so that every column can be split on white space.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(cells []string) {
		for i, c := range cells {
			if c == "" {
				c = "-"
			}
			if i > 0 {
				io.WriteString(tw, "\t")
			}
			io.WriteString(tw, c)
		}
		io.WriteString(tw, "\n")
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// offsetCell prints an offset or lag, or "-" where it is unknown (-1).
func offsetCell(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
