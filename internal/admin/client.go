package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// Client asks the instances of a deployment, found through their consumer
// groups, for what they own: the CLI's `show` and `upcoming`, and the web
// page. Safe for concurrent use; each call connects to the cluster.
type Client struct {
	Kafka  kafkaclient.Kafka
	Topics topology.Topics
	HTTP   *http.Client // nil: 10 s timeout, dialing only Peers
	// Token is the deployment's admin token, sent to every instance.
	Token string
	// ShowPhones asks the instances for users' phone numbers in full
	// (which they give only with Token); else they are masked.
	ShowPhones bool
	// Peers are the networks the instances' announced URLs may be in; nil:
	// DefaultPeers of the brokers.
	Peers *Peers

	once   sync.Once
	client *http.Client // built once: one transport, its connections reused
}

// maxAnswer bounds what is read of an instance's answer.
const maxAnswer = 16 << 20

func (c *Client) http(ctx context.Context) *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	c.once.Do(func() { c.client = c.newHTTP(ctx) })
	return c.client
}

// newHTTP builds the client that dials only the Peers.
func (c *Client) newHTTP(ctx context.Context) *http.Client {
	p := c.Peers
	if p == nil {
		d := DefaultPeers(ctx, c.Kafka.Brokers)
		p = &d
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		// No proxy: the address dialed is the one checked.
		Transport: &http.Transport{Proxy: nil, DialContext: p.dialer().DialContext, TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return fmt.Errorf("%w: it redirects", ErrRefusedURL)
		},
	}
}

// Cluster is what describing a group found: the announcing instances, the
// partitions none of them owns (rebalancing, or owned by an instance
// without a web server, or one whose announced URL is refused), and the
// partition count.
type Cluster struct {
	Instances  []Instance
	Missing    []int32
	Partitions int32
	// Refused says which members' announced URLs CheckURL refused, and why.
	Refused []string
}

// Discover describes group and returns its instances owning partitions of
// topic.
func (c *Client) Discover(ctx context.Context, group, topic string) (Cluster, error) {
	client, err := c.Kafka.Connect(ctx)
	if err != nil {
		return Cluster{}, err
	}
	defer client.Close()
	return discover(client, group, topic)
}

func discover(client sarama.Client, group, topic string) (Cluster, error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return Cluster{}, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	found, _, err := Discover(client, group, topic)
	if err != nil {
		return Cluster{}, err
	}
	var refused []string
	found = slices.DeleteFunc(found, func(in Instance) bool {
		if _, err := CheckURL(in.URL); err != nil {
			refused = append(refused, "member "+in.Member+": "+err.Error())
			return true
		}
		return false
	})
	owned := map[int32]bool{}
	for _, in := range found {
		for _, p := range in.Partitions {
			owned[p] = true
		}
	}
	cl := Cluster{Instances: found, Partitions: int32(len(parts)), Refused: refused}
	for _, p := range parts {
		if !owned[p] {
			cl.Missing = append(cl.Missing, p)
		}
	}
	return cl, nil
}

// UpcomingQuery selects follow-ups: due from From to To (zero: open), of
// Campaign (empty: any), at most Limit (1 to 10000).
type UpcomingQuery struct {
	From, To time.Time
	Campaign string
	Limit    int
}

func (q UpcomingQuery) values() url.Values {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.Format(time.RFC3339Nano))
	}
	if q.Campaign != "" {
		v.Set("campaign", q.Campaign)
	}
	v.Set("limit", fmt.Sprint(q.Limit))
	return v
}

// Upcoming asks every scheduler instance for its next follow-ups and
// merges them in firing order. progress, if not nil, is told after each
// instance how many partitions answered of how many. The Cluster says
// which partitions no instance answered for.
func (c *Client) Upcoming(ctx context.Context, q UpcomingQuery, progress func(answered, of int32)) ([]Upcoming, Cluster, error) {
	cl, err := c.Discover(ctx, string(c.Topics.Scheduler), string(c.Topics.Onboarding))
	if err != nil {
		return nil, cl, err
	}
	var all []Upcoming
	var answered int32
	for _, in := range cl.Instances {
		var page UpcomingPage
		if err := c.get(ctx, in.URL, []string{"admin", "upcoming"}, q.values(), &page); err != nil {
			return nil, cl, err
		}
		all = append(all, page.Upcoming...)
		answered += int32(len(page.Partitions))
		if progress != nil {
			progress(answered, cl.Partitions)
		}
	}
	slices.SortStableFunc(all, func(a, b Upcoming) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return strings.Compare(a.UserID+"\x00"+a.TaskID, b.UserID+"\x00"+b.TaskID)
	})
	if len(all) > q.Limit {
		all = all[:q.Limit]
	}
	return all, cl, nil
}

// UserView is a user's values as the owning instances answered: the
// scheduler's (UserState) and the dialer's (DialerState), as protojson
// with proto names; nil where no instance with a web server owns the
// user's partition, or the table has no value.
type UserView struct {
	UserID            string
	Partition         int32
	Scheduler, Dialer json.RawMessage
	// Why a stored value does not decode (User.SchedulerUnreadable).
	SchedulerUnreadable, DialerUnreadable string
	// The instances asked; empty when none owns the partition.
	SchedulerURL, DialerURL string
}

// User asks the instances owning the user's partition in the scheduler's
// and the dialer's groups for the user's values.
func (c *Client) User(ctx context.Context, user string) (UserView, error) {
	client, err := c.Kafka.Connect(ctx)
	if err != nil {
		return UserView{}, err
	}
	defer client.Close()
	v := UserView{UserID: user}
	for _, side := range []struct {
		group, topic string
		raw          *json.RawMessage
		url          *string
		dialer       bool
	}{
		{string(c.Topics.Scheduler), string(c.Topics.Onboarding), &v.Scheduler, &v.SchedulerURL, false},
		{string(c.Topics.Dialer), string(c.Topics.Calls), &v.Dialer, &v.DialerURL, true},
	} {
		cl, err := discover(client, side.group, side.topic)
		if err != nil {
			return v, err
		}
		v.Partition = topology.Partition(user, cl.Partitions)
		in, ok := Owner(cl.Instances, v.Partition)
		if !ok {
			continue
		}
		var u User
		var q url.Values
		if c.ShowPhones {
			q = url.Values{PhonesParam: {PhonesFull}}
		}
		if err := c.get(ctx, in.URL, []string{"admin", "user", url.PathEscape(user)}, q, &u); err != nil {
			return v, err
		}
		*side.url = in.URL
		if side.dialer {
			*side.raw, v.DialerUnreadable = u.Dialer, u.DialerUnreadable
		} else {
			*side.raw, v.SchedulerUnreadable = u.Scheduler, u.SchedulerUnreadable
		}
	}
	return v, nil
}

// get asks the instance at base (an announced URL) for path (escaped
// segments) with query q, and decodes its JSON answer into v. Its errors
// never quote what the instance answered.
func (c *Client) get(ctx context.Context, base string, path []string, q url.Values, v any) error {
	base, err := CheckURL(base)
	if err != nil {
		return err
	}
	u, err := url.JoinPath(base, path...)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefusedURL, err)
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.http(ctx).Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("admin API %s: %w", u, ErrUnauthorized)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("admin API %s: %d %s", u, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(v); err != nil {
		return fmt.Errorf("admin API %s: the answer is not the admin API's JSON", u)
	}
	return nil
}
