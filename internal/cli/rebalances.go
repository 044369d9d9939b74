package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/groupd/groupd/internal/inspect"
)

func rebalancesCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rebalances GROUP",
		Short: "Show a group's rebalance history (groupd only, from its admin API)",
		Long: `Show the rebalances groupd recorded for a group, oldest first: when each
started, how long it took, what triggered it and which member, the generation
before and after, how many members came and went, how many partitions moved
and the longest pause of one of them, and whether it was part of a storm of
repeats (with the likely cause).

The history comes from groupd's HTTP admin API at --admin-addr (groupd's
--http-listen), not from the Kafka protocol: Kafka keeps no such record.
--output json prints the API's JSON as it came.`,
		Args: exactArgs("GROUP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			body, rs, err := o.fetchRebalances(ctx, group)
			if err != nil {
				return o.fail(fmt.Sprintf("rebalances of group %q", group), err)
			}
			if o.json() {
				body = bytes.TrimRight(body, "\n")
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n", body)
				return err
			}
			if len(rs) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "Group '%s' has no recorded rebalances.\n", group)
			}
			return writeTable(cmd.OutOrStdout(), rebalanceHeader, rebalanceRows(rs))
		},
	}
	cmd.Flags().StringVar(&o.adminAddr, "admin-addr", "127.0.0.1:9644", "HOST:PORT of groupd's admin API (its --http-listen)")
	return cmd
}

var rebalanceHeader = []string{"STARTED", "DURATION", "TRIGGER", "MEMBER", "GENERATION", "MEMBERS-IN", "MEMBERS-OUT", "MOVED", "MAX-PAUSE", "STORM"}

func rebalanceRows(rs []inspect.Rebalance) [][]string {
	rows := make([][]string, 0, len(rs))
	for _, r := range rs {
		// No white space inside a cell but the last, so that the table
		// splits on it.
		duration := "in-progress"
		if r.EndedAt != nil {
			duration = msDuration(r.DurationMs)
		}
		member := ""
		if r.Member != nil {
			member = r.Member.MemberID
			if r.Member.InstanceID != "" {
				member += "(" + r.Member.InstanceID + ")"
			}
		}
		var maxPause int64 = -1
		for _, m := range r.Moved {
			maxPause = max(maxPause, m.PauseMs)
		}
		pause := ""
		if maxPause >= 0 {
			pause = msDuration(maxPause)
		}
		storm := ""
		if r.Storm {
			storm = "yes"
			if r.StormCause != "" {
				storm += ": " + r.StormCause
			}
		}
		rows = append(rows, []string{
			r.StartedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			duration,
			r.Trigger,
			member,
			fmt.Sprintf("%d→%d", r.GenerationBefore, r.GenerationAfter),
			fmt.Sprint(len(r.MembersIn)),
			fmt.Sprint(len(r.MembersOut)),
			fmt.Sprint(len(r.Moved)),
			pause,
			storm,
		})
	}
	return rows
}

func msDuration(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() }

// fetchRebalances GETs the group's rebalance history from the admin API.
// It returns the body as served and its decoding.
func (o *options) fetchRebalances(ctx context.Context, group string) ([]byte, []inspect.Rebalance, error) {
	base := o.adminAddr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + "/api/v1/groups/" + url.PathEscape(group) + "/rebalances"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("--admin-addr %q: %w", o.adminAddr, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, &adminError{addr: o.adminAddr, err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, &adminError{addr: o.adminAddr, err: err}
	}
	if resp.StatusCode != http.StatusOK {
		var apiErr struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &apiErr) == nil && apiErr.Error != "" {
			msg = apiErr.Error
		}
		if resp.StatusCode == http.StatusNotFound {
			return nil, nil, fmt.Errorf("%w: the admin API at %s answered 404: %s", kerr.GroupIDNotFound, o.adminAddr, msg)
		}
		return nil, nil, &adminError{addr: o.adminAddr, err: fmt.Errorf("answered %s: %s", resp.Status, msg)}
	}
	var rs []inspect.Rebalance
	if err := json.Unmarshal(body, &rs); err != nil {
		return nil, nil, &adminError{addr: o.adminAddr, err: fmt.Errorf("answered what is not a rebalance history: %w", err)}
	}
	return body, rs, nil
}

// adminError is a failure to talk to the admin API, as opposed to the
// API's answer that the group does not exist.
type adminError struct {
	addr string
	err  error
}

func (e *adminError) Error() string {
	return fmt.Sprintf("admin API at %s: %v\nThis command reads groupd's admin API: is groupd running with --http-listen, and is --admin-addr that address?", e.addr, e.err)
}

func (e *adminError) Unwrap() error { return e.err }
