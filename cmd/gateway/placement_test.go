package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/protocol"
	"github.com/jetway-gateway/jetway/internal/telemetry"
)

// placementWorld is a gateway on testdata/placements.yaml: model claude
// (mock-a) in us-east-1 and us-west-2 of the mock, service tiers with
// their prices, and tenants with application inference profiles.
func placementWorld(t *testing.T, env map[string]string) (*world, *gw, string) {
	t.Helper()
	w := newWorld(t, fastPace())
	cfg, err := filepath.Abs("testdata/placements.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := map[string]string{"JETWAY_CONFIG": cfg, "JETWAY_USAGE_DIR": dir}
	for k, v := range env {
		e[k] = v
	}
	w.mock.AddProfile("arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/contoso1", "mock-a")
	w.mock.AddProfile("arn:aws:bedrock:us-west-2:111122223333:application-inference-profile/fabrikam1", "mock-a")
	w.mock.AddProfile("arn:aws:bedrock:us-west-2:111122223333:application-inference-profile/fabrikamown", "mock-a")
	return w, w.start(e), dir
}

// sendOn sends req on c and waits for its terminal.
func sendOn(t *testing.T, c *client.Client, req client.Request) (*client.Done, error) {
	t.Helper()
	if req.RequestID == "" {
		req.RequestID = client.NewRequestID()
	}
	call, err := c.Send(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return waitCall(t, call, 30*time.Second)
}

// usageOf waits for the usage record of each request id and returns them.
func usageOf(t *testing.T, dir string, ids ...string) map[string]telemetry.UsageRecord {
	t.Helper()
	out := map[string]telemetry.UsageRecord{}
	until(t, 20*time.Second, "the usage records", func() string {
		recs, _, err := telemetry.ReadUsageDir(dir)
		if err != nil {
			return err.Error()
		}
		for _, r := range recs {
			out[r.RequestID] = r
		}
		for _, id := range ids {
			if _, ok := out[id]; !ok {
				return "no record of " + id
			}
		}
		return ""
	})
	return out
}

// gaugeWith is the value of the sample of name whose labels include every
// pair of labels (-1: none).
func gaugeWith(t *testing.T, admin, name string, labels map[string]string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for k, v := range labels {
			if !strings.Contains(line, k+`="`+v+`"`) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		return v
	}
	return -1
}

// TestPlacementsThroughTheGateway (issue 35): a model in two regions of
// the mock, the first throttling half its calls.
func TestPlacementsThroughTheGateway(t *testing.T) {
	w, g, dir := placementWorld(t, map[string]string{"JETWAY_BREAKER_THRESHOLD": "3", "JETWAY_BREAKER_OPEN_TIMEOUT": "1s"})
	if err := w.mock.SetFault(mockmodel.Fault{Region: "us-east-1", Model: "mock-a", ThrottlePercent: 50}); err != nil {
		t.Fatal(err)
	}

	// Every request is answered by the model asked for, with no fallback
	// to another model.
	var ids []string
	for i := range 30 {
		c := w.dialApp(g, fmt.Sprintf("placed-user-%d", i), "acme", "acme-chat")
		id := fmt.Sprintf("placed-%02d", i)
		d, err := sendOn(t, c, client.Request{RequestID: id, Messages: []client.Message{{Role: "user", Content: fmt.Sprintf("question %d", i)}}, MaxTokens: 20})
		if err != nil || d.Model != "claude" {
			t.Fatalf("request %d: %+v %v, want claude's answer", i, d, err)
		}
		ids = append(ids, id)
	}
	if n := w.mock.Requests("mock-b"); n != 0 {
		t.Fatalf("the fallback model was called %d times", n)
	}
	recs := usageOf(t, dir, ids...)
	byPlace := map[string]int{}
	for _, id := range ids {
		r := recs[id]
		if r.FallbackFrom != "" || r.Outcome != "done" || r.Model != "claude" {
			t.Errorf("%s: record %+v, want done by claude without a fallback", id, r)
		}
		byPlace[r.Placement]++
	}
	if byPlace["us-east-1"] == 0 || byPlace["us-west-2"] == 0 || byPlace["us-east-1"]+byPlace["us-west-2"] != 30 {
		t.Errorf("answers by placement %v, want both regions and nothing else", byPlace)
	}
	t.Logf("30 requests, us-east-1 throttling 50%%: answered in %v, %d throttled calls absorbed, 0 fallbacks",
		byPlace, w.mock.ThrottledIn("us-east-1"))

	// A 20-turn conversation stays on its placement until that placement
	// throttles, then moves once; its prompt cache reads show it.
	w.mock.ClearFaults()
	c := w.dialApp(g, "conversation-user", "acme", "acme-chat")
	var msgs []client.Message
	var turns []string
	var first string
	for turn := 1; turn <= 20; turn++ {
		if turn == 2 {
			// Turn 1 showed where the conversation lives: from here, every
			// second call there throttles (turn 2 answers, turn 3 moves).
			if err := w.mock.SetFault(mockmodel.Fault{Region: first, Model: "mock-a", ThrottlePercent: 50}); err != nil {
				t.Fatal(err)
			}
		}
		msgs = append(msgs, client.Message{Role: "user", Content: fmt.Sprintf("Turn %d about my booking %s", turn, strings.Repeat("detail ", 30))})
		id := fmt.Sprintf("conv-turn-%02d", turn)
		d, err := sendOn(t, c, client.Request{RequestID: id, System: longSystem, Messages: msgs, MaxTokens: 30})
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		msgs = append(msgs, d.Turn())
		turns = append(turns, id)
		if turn == 1 {
			first = usageOf(t, dir, id)[id].Placement
		}
	}
	recs = usageOf(t, dir, turns...)
	moves := 0
	for i, id := range turns {
		r := recs[id]
		if i > 0 && r.Placement != recs[turns[i-1]].Placement {
			moves++
		}
		want := first
		if i >= 2 {
			want = otherRegion(first)
		}
		if r.Placement != want {
			t.Errorf("turn %d answered in %s, want %s", i+1, r.Placement, want)
		}
		switch {
		case i == 0 || i == 2: // the first turn, and the first in the new region: nothing cached there yet
			if r.CacheReadInputTokens != 0 || r.CacheWriteInputTokens == 0 {
				t.Errorf("turn %d (%s): cache read %d write %d, want a write and no read", i+1, r.Placement, r.CacheReadInputTokens, r.CacheWriteInputTokens)
			}
		default:
			if r.CacheReadInputTokens == 0 {
				t.Errorf("turn %d (%s): no prompt cache read", i+1, r.Placement)
			}
		}
	}
	if moves != 1 {
		t.Errorf("the conversation moved %d times, want once", moves)
	}

	// Every placement throttling: the app without a fallback gets a
	// retryable model_unavailable; with one, its fallback answers.
	for _, region := range []string{"us-east-1", "us-west-2"} {
		if err := w.mock.SetFault(mockmodel.Fault{Region: region, Model: "mock-a", ThrottlePercent: 100}); err != nil {
			t.Fatal(err)
		}
	}
	soloUser := w.dialApp(g, "solo-user", "acme", "acme-solo")
	for i := range 3 { // JETWAY_BREAKER_THRESHOLD failures open both breakers
		_, err := sendOn(t, soloUser, ask(fmt.Sprintf("everything throttles %d", i)))
		var pe *client.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeModelUnavailable || !pe.Retryable {
			t.Fatalf("every placement throttling: %v, want a retryable model_unavailable", err)
		}
	}
	d, err := sendOn(t, w.dialApp(g, "fb-user", "acme", "acme-chat"), ask("everything throttles, with a fallback"))
	if err != nil || d.Model != "backup" {
		t.Fatalf("with a fallback: %+v %v, want backup's answer", d, err)
	}

	// The breakers opened; once the regions recover, us-east-1's breaker
	// closes again and it answers.
	for _, region := range []string{"us-east-1", "us-west-2"} {
		if s := gaugeWith(t, g.Admin, "jetway_breaker_state", map[string]string{"model": "claude", "placement": region}); s != 2 {
			t.Errorf("breaker_state{claude, %s} = %v, want 2 (open)", region, s)
		}
	}
	w.mock.ClearFaults()
	east := w.mock.RequestsIn("us-east-1", "mock-a")
	solo := w.dialApp(g, "recovered-user", "acme", "acme-solo")
	until(t, 30*time.Second, "us-east-1 to answer again", func() string {
		if _, err := sendOn(t, solo, ask(fmt.Sprintf("recovered? %d", time.Now().UnixNano()))); err != nil {
			return err.Error()
		}
		if gaugeWith(t, g.Admin, "jetway_breaker_state", map[string]string{"model": "claude", "placement": "us-east-1"}) != 0 ||
			w.mock.RequestsIn("us-east-1", "mock-a") == east {
			return "us-east-1's breaker is not closed, or it served nothing"
		}
		return ""
	})
}

func otherRegion(r string) string {
	if r == "us-east-1" {
		return "us-west-2"
	}
	return "us-east-1"
}

// TestApplicationInferenceProfiles (issue 35): each tenant's requests go
// to its own profile (an app's own first), priced as the profile's base
// model; the usage records and `gateway usage` by tenant and profile say so.
func TestApplicationInferenceProfiles(t *testing.T) {
	w, g, dir := placementWorld(t, nil)
	const (
		contosoARN = "arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/contoso1"
		fabARN     = "arn:aws:bedrock:us-west-2:111122223333:application-inference-profile/fabrikam1"
		ownARN     = "arn:aws:bedrock:us-west-2:111122223333:application-inference-profile/fabrikamown"
	)
	cases := []struct{ sub, tenant, client, arn, region string }{
		{"p-contoso", "contoso", "contoso-chat", contosoARN, "us-east-1"},
		{"p-fabrikam", "fabrikam", "fabrikam-chat", fabARN, "us-west-2"},
		{"p-own", "fabrikam", "fabrikam-own", ownARN, "us-west-2"},
		{"p-acme", "acme", "acme-chat", "", ""},
	}
	var ids []string
	dones := map[string]*client.Done{}
	for i, c := range cases {
		cl := w.dialApp(g, c.sub, c.tenant, c.client)
		for j := range 2 {
			id := fmt.Sprintf("profile-%d-%d", i, j)
			d, err := sendOn(t, cl, client.Request{RequestID: id, Messages: []client.Message{{Role: "user", Content: "bill me " + id}}, MaxTokens: 25})
			if err != nil || d.Model != "claude" {
				t.Fatalf("%s: %+v %v", id, d, err)
			}
			if d.Text != expected("mock-a", "bill me "+id, 25) {
				t.Errorf("%s: the profile's answer is not its base model's", id)
			}
			ids, dones[id] = append(ids, id), d
		}
	}
	recs := usageOf(t, dir, ids...)
	for i, c := range cases {
		for j := range 2 {
			id := fmt.Sprintf("profile-%d-%d", i, j)
			r := recs[id]
			if r.BedrockProfile != c.arn || r.Tenant != c.tenant {
				t.Errorf("%s: record tenant %s profile %q, want %s %q", id, r.Tenant, r.BedrockProfile, c.tenant, c.arn)
			}
			if c.region != "" && r.Placement != c.region {
				t.Errorf("%s: placement %q, want the profile's region %s", id, r.Placement, c.region)
			}
			u := dones[id].Usage
			want := (float64(u.InputTokens)*0.003 + float64(u.OutputTokens)*0.015) / 1000
			if math.Abs(r.CostUSD-want) > 1.5e-6 {
				t.Errorf("%s: cost %v, want %v (the base model's price)", id, r.CostUSD, want)
			}
		}
		if c.arn != "" && w.mock.ProfileRequests(c.arn) != 2 {
			t.Errorf("profile %s got %d calls, want 2", c.arn, w.mock.ProfileRequests(c.arn))
		}
	}
	out := w.runCommand(nil, "usage", "--dir", dir, "--by", "tenant,profile")
	for _, want := range []string{contosoARN, fabARN, ownARN} {
		if !strings.Contains(out, want) {
			t.Errorf("gateway usage --by tenant,profile lacks %s:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "contoso ") && !strings.Contains(line, contosoARN) {
			t.Errorf("contoso's row names another profile: %q", line)
		}
	}
	t.Logf("gateway usage --by tenant,profile:\n%s", out)
}

// placedConfig is testdata/jetway.yaml with mock-a and mock-b served in
// us-east-1 and us-west-2 of the mock; it returns the file's path.
func placedConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/jetway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, m := range []string{"mock-a", "mock-b"} {
		head := "  - id: " + m + "\n    bedrock_id: " + m + "\n"
		if !strings.Contains(s, head) {
			t.Fatalf("testdata/jetway.yaml has no %q", head)
		}
		s = strings.Replace(s, head, head+"    placements: [{region: us-east-1}, {region: us-west-2}]\n", 1)
	}
	path := filepath.Join(t.TempDir(), "placed.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestArticleTestsOneRegionDown (issue 35): the seed's Test 1 and Test 2
// with mock-a served in two regions, one of them unavailable throughout.
func TestArticleTestsOneRegionDown(t *testing.T) {
	t.Run("Test 1", func(t *testing.T) {
		w := newWorld(t, fastPace())
		w.env["JETWAY_CONFIG"] = placedConfig(t)
		if err := w.mock.SetFault(mockmodel.Fault{Region: "us-west-2", Unavailable: true}); err != nil {
			t.Fatal(err)
		}
		g := w.start(nil)
		r := runTest1(t, w, g, 10, 10)
		if r.sent != 100 || r.done != 100 || r.lost != 0 || r.incomplete != 0 || r.unfinished != 0 || r.dups != 0 {
			t.Fatalf("Test 1 with us-west-2 down: %+v", r)
		}
		if n := w.mock.Requests("mock-b"); n != 0 {
			t.Errorf("the fallback model answered %d requests: a region down is absorbed by the other", n)
		}
		t.Logf("Test 1 (10x10, us-west-2 down): done=%d lost=%d; calls: us-east-1 %d answered, us-west-2 %d refused (its breaker then skipped it)",
			r.done, r.lost, w.mock.RequestsIn("us-east-1", "mock-a"), w.mock.UnavailableIn("us-west-2"))
	})
	t.Run("Test 2", func(t *testing.T) {
		r := runTest2With(t, test2Options{regionDown: "us-east-1"})
		if r.used != r.charged {
			t.Fatalf("settled usage %d != charged in done frames %d", r.used, r.charged)
		}
		if r.calls != r.boarded {
			t.Fatalf("answering model calls %d != boarded %d", r.calls, r.boarded)
		}
	})
}

// TestPlacementInAnotherAccount (issue 35): a placement with a role_arn is
// called with the credentials STS's AssumeRole gives the task for that
// role, assumed once and cached; the gateway's own placement keeps the
// task's credentials. STS is a local endpoint speaking its Query protocol.
func TestPlacementInAnotherAccount(t *testing.T) {
	w := newWorld(t, fastPace())
	const role = "arn:aws:iam::111122223333:role/jetway-bedrock"
	var mu sync.Mutex
	var assumed []url.Values
	sts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Form.Get("Action") != "AssumeRole" {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		assumed = append(assumed, r.Form)
		mu.Unlock()
		rw.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(rw, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
<Credentials><AccessKeyId>ASIAPLACEMENT</AccessKeyId><SecretAccessKey>secret</SecretAccessKey><SessionToken>session</SessionToken>
<Expiration>%s</Expiration></Credentials>
<AssumedRoleUser><Arn>arn:aws:sts::111122223333:assumed-role/jetway-bedrock/s</Arn><AssumedRoleId>AROAEXAMPLE:s</AssumedRoleId></AssumedRoleUser>
</AssumeRoleResult><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata></AssumeRoleResponse>`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	t.Cleanup(sts.Close)
	// The Bedrock endpoint records which access key signed each region's calls.
	keys := map[string]map[string]int{}
	bedrock := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if _, cred, ok := strings.Cut(auth, "Credential="); ok {
			parts := strings.Split(strings.SplitN(cred, ",", 2)[0], "/")
			if len(parts) == 5 {
				mu.Lock()
				if keys[parts[2]] == nil {
					keys[parts[2]] = map[string]int{}
				}
				keys[parts[2]][parts[0]]++
				mu.Unlock()
			}
		}
		w.mock.ServeHTTP(rw, r)
	}))
	t.Cleanup(bedrock.Close)
	cfg := filepath.Join(t.TempDir(), "accounts.yaml")
	if err := os.WriteFile(cfg, []byte(`models:
  - id: claude
    bedrock_id: mock-a
    price: {input_per_1k: 0.003, output_per_1k: 0.015}
    placements:
      - region: us-east-1
      - region: eu-west-1
        role_arn: `+role+`
tenants:
  - id: acme
    apps:
      - id: chat
        client_ids: [acme-chat]
        models: {default: claude}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g := w.start(map[string]string{"JETWAY_CONFIG": cfg, "JETWAY_USAGE_DIR": dir, "JETWAY_SERVER_ID": "task/7",
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": bedrock.URL, "AWS_ENDPOINT_URL_STS": sts.URL})
	if err := w.mock.SetFault(mockmodel.Fault{Region: "us-east-1", Unavailable: true}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 4 {
		c := w.dialApp(g, fmt.Sprintf("account-user-%d", i), "acme", "acme-chat")
		id := fmt.Sprintf("account-%d", i)
		if _, err := sendOn(t, c, client.Request{RequestID: id, Messages: []client.Message{{Role: "user", Content: "hi"}}, MaxTokens: 5}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		ids = append(ids, id)
	}
	for id, r := range usageOf(t, dir, ids...) {
		if r.Placement != "eu-west-1/111122223333" {
			t.Errorf("%s answered at %q, want eu-west-1/111122223333", id, r.Placement)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(assumed) != 1 || assumed[0].Get("RoleArn") != role || assumed[0].Get("RoleSessionName") != "jetway-task-7" {
		t.Errorf("AssumeRole calls %v, want one for %s with session jetway-task-7", assumed, role)
	}
	if keys["eu-west-1"]["ASIAPLACEMENT"] != 4 || len(keys["eu-west-1"]) != 1 {
		t.Errorf("eu-west-1 calls by access key %v, want 4 with the role's", keys["eu-west-1"])
	}
	if keys["us-east-1"]["test"] == 0 || keys["us-east-1"]["ASIAPLACEMENT"] != 0 {
		t.Errorf("us-east-1 calls by access key %v, want the task's own", keys["us-east-1"])
	}
}
