package admin

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/groupd/groupd/internal/admin/admintest"
	"github.com/groupd/groupd/internal/inspect"
)

// The status page in a real headless browser (Debian's chromium), over the
// sample groups; internal/e2e runs it over a real groupd. admintest's
// proxy is the browser's only way out, so nothing leaves the machine.

// liveSource serves the sample groups as of its last reset.
type liveSource struct {
	mu  sync.Mutex
	src *fakeSource
}

func (l *liveSource) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.src = sampleSource(time.Now())
}

func (l *liveSource) current() *fakeSource {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src
}

func (l *liveSource) Groups(ctx context.Context) ([]inspect.GroupSummary, error) {
	return l.current().Groups(ctx)
}

func (l *liveSource) Group(ctx context.Context, id string) (inspect.Group, bool, error) {
	return l.current().Group(ctx, id)
}

func (l *liveSource) Rebalances(ctx context.Context, id string) ([]inspect.Rebalance, bool, error) {
	return l.current().Rebalances(ctx, id)
}

// Shorthands for the DOM helpers.
var (
	find     = admintest.Find
	attr     = admintest.Attr
	withAttr = admintest.WithAttr
	byID     = admintest.ByID
	text     = admintest.Text
)

func TestStatusPageInBrowser(t *testing.T) {
	bin := admintest.Chromium(t)
	live := &liveSource{}
	live.reset()
	src := live.current()
	srv := httptest.NewServer(Handler(Config{Source: live}))
	defer srv.Close()
	b := admintest.NewBrowser(t, bin, admintest.NewProxy(t, srv.URL))
	// The sample is rebuilt around the time of each run, so the pages
	// (and the screenshots) show heartbeats as fresh as a live group's.
	b.Before = live.reset

	// The group list: every group, with the trigger of its last
	// rebalance in its row.
	doc := b.DOM(srv.URL + "/")
	rows := find(doc, func(n *html.Node) bool { _, ok := attr(n, "data-group"); return ok && n.Data == "tr" })
	if len(rows) != len(src.groups) {
		t.Fatalf("group list shows %d rows, want %d; page text:\n%s", len(rows), len(src.groups), text(byID(doc, "main")))
	}
	for _, row := range rows {
		id, _ := attr(row, "data-group")
		g, ok := src.groups[id]
		if !ok {
			t.Errorf("row for unknown group %q", id)
			continue
		}
		rowText := text(row)
		if rs := src.rebalances[id]; len(rs) > 0 && !strings.Contains(rowText, rs[len(rs)-1].Trigger) {
			t.Errorf("row of %q lacks its last trigger %q: %q", id, rs[len(rs)-1].Trigger, rowText)
		}
		if !strings.Contains(rowText, g.State) {
			t.Errorf("row of %q lacks its state %q: %q", id, g.State, rowText)
		}
	}

	// A group's page: its members, its last rebalance's trigger, the
	// timeline with one mark per rebalance, and the partition pauses.
	for _, id := range []string{busyGroup, slashGroup, spaceGroup, dotsGroup, joiningGroup} {
		doc := b.DOM(srv.URL + "/#/groups/" + url.PathEscape(id))
		if got := text(byID(doc, "gname")); got != id {
			t.Errorf("group page of %q is titled %q; page text:\n%s", id, got, text(byID(doc, "main")))
			continue
		}
		g := src.groups[id]
		for _, m := range g.Members {
			row := find(doc, withAttr("data-member", m.MemberID))
			if len(row) != 1 || !strings.Contains(text(row[0]), m.ClientID) || !strings.Contains(text(row[0]), m.ClientHost) {
				t.Errorf("group %q: member %s (%s) not shown with its client id and host", id, m.MemberID, m.ClientID)
				continue
			}
			// A classic member inside a consumer group is marked.
			badge := find(row[0], func(n *html.Node) bool {
				return strings.Contains(getAttr(n, "class"), "badge") && text(n) == inspect.TypeClassic
			})
			if want := m.Protocol == inspect.TypeClassic; (len(badge) == 1) != want {
				t.Errorf("group %q: member %s (protocol %q): classic badge shown %v, want %v", id, m.MemberID, m.Protocol, len(badge) == 1, want)
			}
		}
		rs := src.rebalances[id]
		last := rs[len(rs)-1]
		tiles := text(byID(doc, "gtiles"))
		if !strings.Contains(tiles, "Last trigger"+last.Trigger) {
			t.Errorf("group %q: tiles %q lack last trigger %q", id, tiles, last.Trigger)
		}
		if detail := text(byID(doc, "detail")); !strings.Contains(detail, last.Trigger) {
			t.Errorf("group %q: the selected rebalance %q is not the last one %q", id, detail, last.Trigger)
		}
		marks := find(doc, func(n *html.Node) bool { return n.Data == "g" && strings.Contains(getAttr(n, "class"), "reb") })
		if len(marks) != len(rs) {
			t.Errorf("group %q: timeline has %d rebalances, want %d", id, len(marks), len(rs))
		}
		history := find(byID(doc, "history"), func(n *html.Node) bool { _, ok := attr(n, "data-started"); return ok })
		if len(history) != len(rs) {
			t.Errorf("group %q: history has %d rows, want %d", id, len(history), len(rs))
		}
		// A group that moved to its coordinator in a cluster says from
		// where, and how long the load took; the others show no tile.
		if mv := src.groups[id].CoordinatorMove; mv != nil {
			if want := fmt.Sprintf("Coordinatornode %d ← node %d · loaded in %d ms", mv.To, mv.From, mv.LoadMs); !strings.Contains(tiles, want) {
				t.Errorf("group %q: tiles %q lack %q", id, tiles, want)
			}
		} else if strings.Contains(tiles, "Coordinator") {
			t.Errorf("group %q: a coordinator tile without a move: %q", id, tiles)
		}
		if id == busyGroup {
			if lag := text(byID(doc, "offsets")); !strings.Contains(lag, "4,512") {
				t.Errorf("busy group's lag table lacks partition 3's lag 4,512: %q", lag)
			}
			if tl := text(byID(doc, "timeline")); !strings.Contains(tl, "storm ×3") {
				t.Errorf("busy group's timeline does not mark the storm of 3: %q", tl)
			}
			checkPauseBars(t, byID(doc, "detail"), last)
		}
	}
	missing := b.DOM(srv.URL + "/#/groups/no-such-group")
	if m := text(byID(missing, "main")); !strings.Contains(m, `group "no-such-group" not found`) {
		t.Errorf("page of an unknown group says %q", m)
	}

	// Screenshots of both pages, for a person to look at.
	for name, page := range map[string]string{"groups.png": "/", "group.png": "/#/groups/" + busyGroup} {
		t.Logf("screenshot of %s: %s", page, b.Screenshot(srv.URL+page, name))
	}

	// Every request the page made went to groupd, and it used the API.
	var api, assets bool
	for _, u := range admintest.CheckOffline(t, b) {
		api = api || u.EscapedPath() == "/api/v1/groups/"+url.PathEscape(busyGroup)+"/rebalances"
		assets = assets || u.Path == "/static/app.js"
	}
	if !api || !assets {
		t.Errorf("the page fetched its script: %v, the busy group's rebalances: %v", assets, api)
	}
}

func getAttr(n *html.Node, key string) string { v, _ := attr(n, key); return v }

// pauseBar is a moved partition's bar in the selected rebalance's chart.
type pauseBar struct {
	move        inspect.Move
	left, right float64
}

// checkPauseBars checks that each moved partition's bar in the detail
// chart runs from its release to its receipt: the bars end in the order
// their partitions were received, start in the order they were released,
// and are as long as their pauses, on one scale.
func checkPauseBars(t *testing.T, detail *html.Node, r inspect.Rebalance) {
	t.Helper()
	moves := map[string]inspect.Move{}
	for _, mv := range r.Moved {
		moves[fmt.Sprintf("%s[%d]", mv.Topic, mv.Partition)] = mv
	}
	var bars []pauseBar
	for _, g := range find(detail, func(n *html.Node) bool { return n.Data == "g" }) {
		rects := find(g, func(n *html.Node) bool { return n.Data == "rect" && getAttr(n, "class") == "pause" })
		labels := find(g, func(n *html.Node) bool { return n.Data == "text" && strings.Contains(getAttr(n, "class"), "label") })
		if len(rects) != 1 || len(labels) != 1 {
			continue
		}
		mv, ok := moves[text(labels[0])]
		if !ok {
			t.Errorf("pause bar for %q, which the rebalance did not move", text(labels[0]))
			continue
		}
		x, err1 := strconv.ParseFloat(getAttr(rects[0], "x"), 64)
		w, err2 := strconv.ParseFloat(getAttr(rects[0], "width"), 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("pause bar of %s: x %q width %q", text(labels[0]), getAttr(rects[0], "x"), getAttr(rects[0], "width"))
		}
		bars = append(bars, pauseBar{mv, x, x + w})
	}
	if len(bars) != len(r.Moved) {
		t.Fatalf("%d pause bars, want one per moved partition (%d)", len(bars), len(r.Moved))
	}
	sort.Slice(bars, func(i, j int) bool { return bars[i].move.AssignedAt.Before(bars[j].move.AssignedAt) })
	pxPerMs := (bars[0].right - bars[0].left) / float64(bars[0].move.PauseMs)
	for i, b := range bars {
		if i > 0 && !(b.right > bars[i-1].right) {
			t.Errorf("bar of %s/%d ends at %.1f, not after that of the partition received before it (%.1f): the bars do not end at each receipt",
				b.move.Topic, b.move.Partition, b.right, bars[i-1].right)
		}
		if want := float64(b.move.PauseMs) * pxPerMs; math.Abs(b.right-b.left-want) > 1 {
			t.Errorf("bar of %s/%d is %.1f px long, want %.1f for its pause of %d ms", b.move.Topic, b.move.Partition, b.right-b.left, want, b.move.PauseMs)
		}
		// Release to receipt on one time axis: the start is the
		// receipt less the pause.
		wantLeft := bars[0].right + float64(b.move.ReleasedAt.Sub(bars[0].move.AssignedAt).Milliseconds())*pxPerMs
		if math.Abs(b.left-wantLeft) > 1 {
			t.Errorf("bar of %s/%d starts at %.1f, want %.1f (its release)", b.move.Topic, b.move.Partition, b.left, wantLeft)
		}
	}
}
