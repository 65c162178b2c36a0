package mockmodel_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
	"github.com/jetway-gateway/jetway/internal/mockmodel/mockmodeltest"
)

const (
	east = "us-east-1"
	west = "us-west-2"
	// profileWest is an application inference profile in us-west-2.
	profileWest = "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/a1b2c3d4e5f6"
)

// outcome classifies a call's result: "ok", "throttled", "unavailable",
// "invalid" (ValidationException) or the error.
func outcome(tr transcript, err error) string {
	var (
		th *types.ThrottlingException
		un *types.ServiceUnavailableException
		va *types.ValidationException
		re *smithyhttp.ResponseError
	)
	status := 0
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	switch {
	case err == nil && tr.streamEr == nil:
		return "ok"
	case errors.As(err, &th) && status == http.StatusTooManyRequests:
		return "throttled"
	case errors.As(err, &un) && status == http.StatusServiceUnavailable:
		return "unavailable"
	case errors.As(err, &va) && status == http.StatusBadRequest:
		return "invalid"
	case err != nil:
		return err.Error()
	}
	return tr.streamEr.Error()
}

// calls makes n calls in a row and returns their outcomes.
func calls(t *testing.T, client *bedrockruntime.Client, model string, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = outcome(converse(t.Context(), client, model, input("", "hi")))
	}
	return out
}

func repeat(pattern []string, times int) []string {
	var out []string
	for range times {
		out = append(out, pattern...)
	}
	return out
}

func TestRegionIsTheSigningScope(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 4})
	eastC, westC := mockmodeltest.ClientIn(t, url, east), mockmodeltest.ClientIn(t, url, west)
	for range 2 {
		if got := outcome(converse(t.Context(), eastC, "mock-a", input("", "hi"))); got != "ok" {
			t.Fatal(got)
		}
	}
	tr, err := converse(t.Context(), westC, "mock-a", input("", "hi"))
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if !slices.Equal(tr.deltas, mockmodel.Tokens("mock-a", "", []string{"hi"}, 4)) {
		t.Errorf("the region changed the answer: %q", tr.deltas)
	}
	if srv.RequestsIn(east, "mock-a") != 2 || srv.RequestsIn(west, "mock-a") != 1 || srv.Requests("mock-a") != 3 {
		t.Errorf("RequestsIn east %d, west %d, Requests %d; want 2, 1, 3",
			srv.RequestsIn(east, "mock-a"), srv.RequestsIn(west, "mock-a"), srv.Requests("mock-a"))
	}

	// Unsigned or unparsable: the default region.
	for _, auth := range []string{"", "Bearer x", "AWS4-HMAC-SHA256 Credential=AKID/20261204, SignedHeaders=host"} {
		if code := rawStatus(t, url, "mock-a", auth, `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`); code != http.StatusOK {
			t.Errorf("Authorization %q: status %d", auth, code)
		}
	}
	if got := srv.RequestsIn(mockmodel.DefaultRegion, "mock-a"); got != 5 {
		t.Errorf("RequestsIn(default region) = %d, want 5", got)
	}
	srv2, url2 := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, DefaultRegion: "eu-central-1"})
	rawStatus(t, url2, "mock-a", "", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	rawStatus(t, url2, "mock-a", "AWS4-HMAC-SHA256 Credential=AKID/20261204/ap-south-1/bedrock/aws4_request, SignedHeaders=host, Signature=00", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	if srv2.RequestsIn("eu-central-1", "mock-a") != 1 || srv2.RequestsIn("ap-south-1", "mock-a") != 1 {
		t.Errorf("Options.DefaultRegion / raw scope: %+v", srv2.Stats().ByRegion)
	}
}

// rawStatus posts body to modelID with the given Authorization header and
// returns the status.
func rawStatus(t *testing.T, url, modelID, auth, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/model/"+modelID+"/converse-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := controlClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sink bytes.Buffer
	_, _ = sink.ReadFrom(resp.Body)
	return resp.StatusCode
}

func controlClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestThrottleKnobIsDeterministicPerRegion(t *testing.T) {
	srv, url := mockmodeltest.Start(t, fast)
	eastC, westC := mockmodeltest.ClientIn(t, url, east), mockmodeltest.ClientIn(t, url, west)
	if err := srv.SetFault(mockmodel.Fault{Region: east, ThrottlePercent: 50}); err != nil {
		t.Fatal(err)
	}
	if got, want := calls(t, eastC, "mock-a", 8), repeat([]string{"ok", "throttled"}, 4); !slices.Equal(got, want) {
		t.Errorf("us-east-1 at 50%%: %q, want %q", got, want)
	}
	if got, want := calls(t, westC, "mock-a", 8), repeat([]string{"ok"}, 8); !slices.Equal(got, want) {
		t.Errorf("us-west-2 without a knob: %q, want %q", got, want)
	}
	if srv.ThrottledIn(east) != 4 || srv.ThrottledIn(west) != 0 || srv.RequestsIn(east, "mock-a") != 8 {
		t.Errorf("ThrottledIn east %d west %d, RequestsIn east %d; want 4, 0, 8",
			srv.ThrottledIn(east), srv.ThrottledIn(west), srv.RequestsIn(east, "mock-a"))
	}
	// Every model of the region shares the knob's count: the 9th call throttles not, the 10th does.
	if got := calls(t, eastC, "mock-b", 2); !slices.Equal(got, []string{"ok", "throttled"}) {
		t.Errorf("mock-b in us-east-1: %q", got)
	}

	// Setting the knob again restarts its count; 25% throttles calls 4, 8.
	if err := srv.SetFault(mockmodel.Fault{Region: east, ThrottlePercent: 25}); err != nil {
		t.Fatal(err)
	}
	if got, want := calls(t, eastC, "mock-a", 8), repeat([]string{"ok", "ok", "ok", "throttled"}, 2); !slices.Equal(got, want) {
		t.Errorf("25%%: %q, want %q", got, want)
	}
	_ = srv.SetFault(mockmodel.Fault{Region: east, ThrottlePercent: 100})
	if got := calls(t, eastC, "mock-a", 3); !slices.Equal(got, repeat([]string{"throttled"}, 3)) {
		t.Errorf("100%%: %q", got)
	}
	// Percent 0 removes the knob.
	_ = srv.SetFault(mockmodel.Fault{Region: east})
	if got := calls(t, eastC, "mock-a", 3); !slices.Equal(got, repeat([]string{"ok"}, 3)) {
		t.Errorf("knob removed: %q", got)
	}
	if len(srv.Faults()) != 0 {
		t.Errorf("Faults() = %+v, want none", srv.Faults())
	}
}

// Calls in parallel: the count is exact whatever the interleaving.
func TestThrottleKnobUnderConcurrency(t *testing.T) {
	srv, url := mockmodeltest.Start(t, fast)
	client := mockmodeltest.ClientIn(t, url, west)
	_ = srv.SetFault(mockmodel.Fault{Region: west, ThrottlePercent: 30})
	var throttled, ok atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			switch got := outcome(converse(t.Context(), client, "mock-a", input("", "hi"))); got {
			case "ok":
				ok.Add(1)
			case "throttled":
				throttled.Add(1)
			default:
				t.Error(got)
			}
		})
	}
	wg.Wait()
	if throttled.Load() != 30 || ok.Load() != 70 || srv.ThrottledIn(west) != 30 {
		t.Errorf("throttled %d ok %d (ThrottledIn %d), want 30 and 70", throttled.Load(), ok.Load(), srv.ThrottledIn(west))
	}
	if f := srv.Faults(); len(f) != 1 || f[0].Calls != 100 {
		t.Errorf("Faults() = %+v, want one knob with 100 calls", f)
	}
}

func TestModelKnobsAndUnavailable(t *testing.T) {
	srv, url := mockmodeltest.Start(t, fast)
	eastC, westC := mockmodeltest.ClientIn(t, url, east), mockmodeltest.ClientIn(t, url, west)
	if err := srv.SetFault(mockmodel.Fault{Region: west, Model: "mock-b", Unavailable: true}); err != nil {
		t.Fatal(err)
	}
	if got := calls(t, westC, "mock-b", 2); !slices.Equal(got, []string{"unavailable", "unavailable"}) {
		t.Errorf("mock-b in us-west-2: %q", got)
	}
	if got := calls(t, westC, "mock-a", 2); !slices.Equal(got, []string{"ok", "ok"}) {
		t.Errorf("mock-a in us-west-2: %q", got)
	}
	if got := calls(t, eastC, "mock-b", 2); !slices.Equal(got, []string{"ok", "ok"}) {
		t.Errorf("mock-b in us-east-1: %q", got)
	}
	if srv.UnavailableIn(west) != 2 || srv.UnavailableIn(east) != 0 {
		t.Errorf("UnavailableIn west %d east %d", srv.UnavailableIn(west), srv.UnavailableIn(east))
	}

	// The most specific knob wins: the region is unavailable but for
	// mock-b, which throttles every second call.
	srv.ClearFaults()
	_ = srv.SetFault(mockmodel.Fault{Region: east, Unavailable: true})
	_ = srv.SetFault(mockmodel.Fault{Region: east, Model: "mock-b", ThrottlePercent: 50})
	if got := calls(t, eastC, "mock-b", 4); !slices.Equal(got, []string{"ok", "throttled", "ok", "throttled"}) {
		t.Errorf("mock-b under its own knob: %q", got)
	}
	if got := calls(t, eastC, "mock-a", 2); !slices.Equal(got, []string{"unavailable", "unavailable"}) {
		t.Errorf("mock-a under the region's knob: %q", got)
	}
	want := []mockmodel.FaultState{
		{Fault: mockmodel.Fault{Region: east, Unavailable: true}, Calls: 2},
		{Fault: mockmodel.Fault{Region: east, Model: "mock-b", ThrottlePercent: 50}, Calls: 4},
	}
	if got := srv.Faults(); !slices.Equal(got, want) {
		t.Errorf("Faults() = %+v, want %+v", got, want)
	}
	// A model-id fault still applies where no knob fails the call.
	srv.ClearFaults()
	if got := calls(t, westC, "mock-throttle", 1); got[0] != "throttled" || srv.ThrottledIn(west) != 1 {
		t.Errorf("mock-throttle: %q, ThrottledIn %d", got, srv.ThrottledIn(west))
	}
	for _, bad := range []mockmodel.Fault{{Region: ""}, {Region: east, ThrottlePercent: 101}, {Region: east, ThrottlePercent: -1}} {
		if err := srv.SetFault(bad); err == nil {
			t.Errorf("SetFault(%+v) accepted", bad)
		}
	}
}

// do sends a control request and returns the status and body.
func do(t *testing.T, hc *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func TestFaultEndpoints(t *testing.T) {
	_, url := mockmodeltest.Start(t, fast)
	hc := controlClient(t)
	eastC, westC := mockmodeltest.ClientIn(t, url, east), mockmodeltest.ClientIn(t, url, west)

	if code, body := do(t, hc, http.MethodPut, url+"/faults", `{"region":"us-east-1","model":"","throttle_percent":50,"unavailable":false}`); code != http.StatusNoContent {
		t.Fatalf("PUT /faults: %d %s", code, body)
	}
	if code, body := do(t, hc, http.MethodPut, url+"/faults", `{"region":"us-west-2","model":"mock-b","unavailable":true}`); code != http.StatusNoContent {
		t.Fatalf("PUT /faults: %d %s", code, body)
	}
	if got := calls(t, eastC, "mock-a", 4); !slices.Equal(got, repeat([]string{"ok", "throttled"}, 2)) {
		t.Errorf("us-east-1 after PUT: %q", got)
	}
	if got := calls(t, westC, "mock-b", 1); got[0] != "unavailable" {
		t.Errorf("mock-b in us-west-2 after PUT: %q", got)
	}
	code, body := do(t, hc, http.MethodGet, url+"/faults", "")
	var list mockmodel.FaultList
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("GET /faults: %d %s %v", code, body, err)
	}
	want := []mockmodel.FaultState{
		{Fault: mockmodel.Fault{Region: east, ThrottlePercent: 50}, Calls: 4},
		{Fault: mockmodel.Fault{Region: west, Model: "mock-b", Unavailable: true}, Calls: 1},
	}
	if !slices.Equal(list.Faults, want) {
		t.Errorf("GET /faults = %s, want %+v", body, want)
	}
	if !strings.Contains(body, `"throttle_percent":50`) || !strings.Contains(body, `"calls":4`) {
		t.Errorf("GET /faults JSON %s", body)
	}

	for _, bad := range []string{
		`{"region":"us-east-1","throttle_percent":101}`,
		`{"region":"us-east-1","throttle_percent":-5}`,
		`{"region":"","throttle_percent":50}`,
		`{"throttle_percent":50}`,
		`{"region":"us-east-1","throttle_percent":"half"}`,
		`{"region":"us-east-1","throttle":50}`,
		`{"region":`,
		``,
	} {
		code, body := do(t, hc, http.MethodPut, url+"/faults", bad)
		var msg struct{ Message string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &msg) != nil || msg.Message == "" {
			t.Errorf("PUT /faults %s: %d %s, want 400 with a message", bad, code, body)
		}
	}

	// 0 and false remove one knob; DELETE removes all.
	if code, _ := do(t, hc, http.MethodPut, url+"/faults", `{"region":"us-east-1","throttle_percent":0,"unavailable":false}`); code != http.StatusNoContent {
		t.Errorf("PUT removal: %d", code)
	}
	if got := calls(t, eastC, "mock-a", 2); !slices.Equal(got, []string{"ok", "ok"}) {
		t.Errorf("after removal: %q", got)
	}
	if code, _ := do(t, hc, http.MethodDelete, url+"/faults", ""); code != http.StatusNoContent {
		t.Errorf("DELETE /faults: %d", code)
	}
	if got := calls(t, westC, "mock-b", 1); got[0] != "ok" {
		t.Errorf("after DELETE: %q", got)
	}
	if _, body := do(t, hc, http.MethodGet, url+"/faults", ""); strings.TrimSpace(body) != `{"faults":[]}` {
		t.Errorf("GET /faults after DELETE: %s", body)
	}
}

func TestApplicationInferenceProfiles(t *testing.T) {
	const (
		throttleProfile = "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/throttles"
		toolsProfile    = "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/tools"
		unknown         = "arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/nobody"
	)
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 6,
		Profiles: map[string]string{profileWest: "mock-a"}})
	eastC, westC := mockmodeltest.ClientIn(t, url, east), mockmodeltest.ClientIn(t, url, west)
	hc := controlClient(t)

	tr, err := converse(t.Context(), westC, profileWest, input("sys", "hello there"))
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if want := mockmodel.Tokens("mock-a", "sys", []string{"hello there"}, 6); !slices.Equal(tr.deltas, want) {
		t.Errorf("profile answer %q, want mock-a's %q", tr.deltas, want)
	}

	// Registered in Go and over HTTP, each behaves as its base model.
	srv.AddProfile(throttleProfile, "mock-throttle")
	if code, body := do(t, hc, http.MethodPut, url+"/profiles", `{"arn":"`+toolsProfile+`","model":"mock-tools"}`); code != http.StatusNoContent {
		t.Fatalf("PUT /profiles: %d %s", code, body)
	}
	if got := calls(t, westC, throttleProfile, 1); got[0] != "throttled" {
		t.Errorf("profile of mock-throttle: %q", got)
	}
	in := input("", "what time is it")
	in.ToolConfig = clockTools(nil)
	bt, err := converseBlocks(t.Context(), westC, toolsProfile, in)
	if err != nil || bt.toolName != "clock" || bt.stop != types.StopReasonToolUse {
		t.Errorf("profile of mock-tools: %+v, %v", bt, err)
	}
	// A knob on the base model applies to its profiles.
	_ = srv.SetFault(mockmodel.Fault{Region: west, Model: "mock-a", Unavailable: true})
	if got := calls(t, westC, profileWest, 1); got[0] != "unavailable" {
		t.Errorf("profile under its base model's knob: %q", got)
	}
	srv.ClearFaults()

	// Unknown, or of another region: Bedrock's ValidationException.
	for _, c := range []struct {
		client *bedrockruntime.Client
		model  string
	}{{westC, unknown}, {eastC, profileWest}} {
		_, err := converse(t.Context(), c.client, c.model, input("", "hi"))
		var va *types.ValidationException
		if !errors.As(err, &va) || va.ErrorMessage() != "The provided model identifier is invalid." {
			t.Errorf("%s: %v, want a ValidationException", c.model, err)
		}
		if got := outcome(transcript{}, err); got != "invalid" {
			t.Errorf("%s: %s", c.model, got)
		}
	}

	// The counts name the ARN.
	if srv.Requests(profileWest) != 3 || srv.RequestsIn(west, profileWest) != 2 || srv.RequestsIn(east, profileWest) != 1 ||
		srv.ProfileRequests(profileWest) != 3 || srv.ProfileRequests(unknown) != 1 || srv.Requests("mock-a") != 0 {
		t.Errorf("counts: %+v", srv.Stats())
	}

	code, body := do(t, hc, http.MethodGet, url+"/profiles", "")
	var pl mockmodel.ProfileList
	if err := json.Unmarshal([]byte(body), &pl); err != nil || code != http.StatusOK || len(pl.Profiles) != 3 ||
		pl.Profiles[toolsProfile] != "mock-tools" || pl.Profiles[profileWest] != "mock-a" {
		t.Errorf("GET /profiles: %d %s", code, body)
	}
	for _, bad := range []string{
		`{"arn":"mock-a","model":"mock-b"}`,
		`{"arn":"arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.mock-a","model":"mock-a"}`,
		`{"arn":"arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/x","model":""}`,
		`{"arn":"arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/x"`,
		`{"arn":"arn:aws:bedrock:us-west-2:123456789012:application-inference-profile/x","model":"mock-a","extra":1}`,
	} {
		code, body := do(t, hc, http.MethodPut, url+"/profiles", bad)
		var msg struct{ Message string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &msg) != nil || msg.Message == "" {
			t.Errorf("PUT /profiles %s: %d %s, want 400 with a message", bad, code, body)
		}
	}
}

func TestGeoPrefixedIDsBehaveAsTheirModel(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 5})
	client := mockmodeltest.ClientIn(t, url, east)
	for _, c := range []struct{ model, want string }{
		{"us.mock-throttle", "throttled"},
		{"eu.mock-unavailable", "unavailable"},
		{"global.mock-throttle", "throttled"},
		{"us-gov.mock-throttle", "throttled"},
		{"apac.mock-a", "ok"},
		{"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.mock-throttle", "throttled"},
	} {
		if got := calls(t, client, c.model, 1); got[0] != c.want {
			t.Errorf("%s: %s, want %s", c.model, got[0], c.want)
		}
	}
	// The words stay a function of the id as named.
	tr, err := converse(t.Context(), client, "us.mock-a", input("", "hi"))
	if err != nil || !slices.Equal(tr.deltas, mockmodel.Tokens("us.mock-a", "", []string{"hi"}, 5)) {
		t.Errorf("us.mock-a: %q, %v", tr.deltas, err)
	}
	tr, err = converse(t.Context(), client, "jp.mock-fail-after-2", input("", "hi"))
	var se *types.ModelStreamErrorException
	if err != nil || len(tr.deltas) != 2 || !errors.As(tr.streamEr, &se) {
		t.Errorf("jp.mock-fail-after-2: %d deltas, %v, %v", len(tr.deltas), err, tr.streamEr)
	}
	tr, err = converse(t.Context(), client, "global.mock-markdown", input("", "hi"))
	if err != nil || !strings.HasPrefix(tr.text(), "#") || !slices.Equal(tr.deltas, mockmodel.Tokens("global.mock-markdown", "", nil, 1000)) {
		t.Errorf("global.mock-markdown: %q, %v", tr.text(), err)
	}
	// A knob on the base model applies; one on the id as named comes first.
	_ = srv.SetFault(mockmodel.Fault{Region: east, Model: "mock-a", Unavailable: true})
	_ = srv.SetFault(mockmodel.Fault{Region: east, Model: "eu.mock-a", ThrottlePercent: 100})
	for model, want := range map[string]string{"us.mock-a": "unavailable", "mock-a": "unavailable", "eu.mock-a": "throttled", "mock-b": "ok"} {
		if got := calls(t, client, model, 1); got[0] != want {
			t.Errorf("%s under knobs: %s, want %s", model, got[0], want)
		}
	}
	for id, want := range map[string]string{
		"us.anthropic.claude-3-5-haiku-20241022-v1:0": "anthropic.claude-3-5-haiku-20241022-v1:0",
		"mock-a":     "mock-a",
		"usa.mock-a": "usa.mock-a",
		"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-v2:1":           "anthropic.claude-v2:1",
		"arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/x":      "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/x",
		"arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.mistral.large-1": "mistral.large-1",
	} {
		if got := mockmodel.BaseModelID(id); got != want {
			t.Errorf("BaseModelID(%q) = %q, want %q", id, got, want)
		}
	}
}

func withTier(in *bedrockruntime.ConverseStreamInput, tier types.ServiceTierType) *bedrockruntime.ConverseStreamInput {
	in.ServiceTier = &types.ServiceTier{Type: tier}
	return in
}

func TestServiceTiers(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 3,
		Tiers: map[string][]string{"mock-b": {"default", "reserved"}}, Profiles: map[string]string{profileWest: "mock-b"}})
	client, westC := mockmodeltest.Client(t, url), mockmodeltest.ClientIn(t, url, west)

	for _, tier := range []types.ServiceTierType{types.ServiceTierTypeFlex, types.ServiceTierTypePriority, types.ServiceTierTypeDefault} {
		tr, err := converse(t.Context(), client, "mock-a", withTier(input("", "hi"), tier))
		if err != nil || tr.streamEr != nil {
			t.Fatalf("%s: %v %v", tier, err, tr.streamEr)
		}
		if tr.tier == nil || tr.tier.Type != tier {
			t.Errorf("%s: metadata serviceTier %+v", tier, tr.tier)
		}
		if !slices.Equal(tr.deltas, mockmodel.Tokens("mock-a", "", []string{"hi"}, 3)) {
			t.Errorf("%s: the tier changed the answer", tier)
		}
	}
	tr, err := converse(t.Context(), client, "mock-a", input("", "hi"))
	if err != nil || tr.tier != nil {
		t.Errorf("no tier named: metadata serviceTier %+v, %v", tr.tier, err)
	}
	// The block path echoes it too.
	in := withTier(input("", "what time is it"), types.ServiceTierTypeFlex)
	in.ToolConfig = clockTools(nil)
	bt, err := converseBlocks(t.Context(), client, "mock-tools", in)
	if err != nil || bt.tier == nil || bt.tier.Type != types.ServiceTierTypeFlex {
		t.Errorf("mock-tools: tier %+v, %v", bt.tier, err)
	}

	refused := func(client *bedrockruntime.Client, model string, tier types.ServiceTierType) {
		t.Helper()
		_, err := converse(t.Context(), client, model, withTier(input("", "hi"), tier))
		var va *types.ValidationException
		if !errors.As(err, &va) || !strings.Contains(va.ErrorMessage(), "serviceTier") {
			t.Errorf("%s in %s: %v, want a ValidationException naming serviceTier", model, tier, err)
		}
	}
	refused(client, "mock-a", types.ServiceTierTypeReserved) // not listed: default, priority, flex
	refused(client, "mock-a", "turbo")
	refused(client, "mock-b", types.ServiceTierTypeFlex) // listed without flex
	refused(westC, profileWest, types.ServiceTierTypeFlex)
	refused(client, "us.mock-b", types.ServiceTierTypeFlex)
	for _, model := range []string{"mock-b", "us.mock-b"} {
		tr, err = converse(t.Context(), client, model, withTier(input("", "hi"), types.ServiceTierTypeReserved))
		if err != nil || tr.tier == nil || tr.tier.Type != types.ServiceTierTypeReserved {
			t.Errorf("%s reserved: %+v %v", model, tr.tier, err)
		}
	}

	st := srv.Stats()
	want := map[string]int64{"flex": 5, "priority": 1, "default": 1, "reserved": 3, "turbo": 1}
	if fmt.Sprint(st.ByTier) != fmt.Sprint(want) || srv.RequestsInTier("flex") != 5 {
		t.Errorf("by_tier %v, want %v", st.ByTier, want)
	}
}

func TestTierPace(t *testing.T) {
	const slow = 300 * time.Millisecond
	_, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 3,
		TierPace: map[string]mockmodel.Pace{"flex": {TTFT: slow, PerToken: mockmodel.NoDelay}}})
	client := mockmodeltest.Client(t, url)
	tr, err := converse(t.Context(), client, "mock-a", withTier(input("", "hi"), types.ServiceTierTypeFlex))
	if err != nil || tr.streamEr != nil {
		t.Fatal(err, tr.streamEr)
	}
	if tr.firstAt < slow || tr.latency < slow.Milliseconds() {
		t.Errorf("flex: first token after %v (latency %d ms), want at least %v", tr.firstAt, tr.latency, slow)
	}
	// The other tiers keep the server's pace (no upper bound asserted:
	// only that they answer, in full).
	for _, in := range []*bedrockruntime.ConverseStreamInput{withTier(input("", "hi"), types.ServiceTierTypePriority), input("", "hi")} {
		tr, err := converse(t.Context(), client, "mock-a", in)
		if err != nil || len(tr.deltas) != 3 {
			t.Errorf("%v: %d deltas, %v", in.ServiceTier, len(tr.deltas), err)
		}
	}

	// A default-tier pace applies to calls naming no tier too.
	_, url2 := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 3,
		TierPace: map[string]mockmodel.Pace{"default": {TTFT: slow, PerToken: mockmodel.NoDelay}}})
	tr, err = converse(t.Context(), mockmodeltest.Client(t, url2), "mock-a", input("", "hi"))
	if err != nil || tr.firstAt < slow {
		t.Errorf("no tier with a default-tier pace: first token after %v, %v", tr.firstAt, err)
	}
}

func TestStatsByRegionTierAndProfile(t *testing.T) {
	srv, url := mockmodeltest.Start(t, mockmodel.Options{TTFT: mockmodel.NoDelay, PerToken: mockmodel.NoDelay, Tokens: 2,
		Profiles: map[string]string{profileWest: "mock-a"}})
	eastC, westC := mockmodeltest.ClientIn(t, url, east), mockmodeltest.ClientIn(t, url, west)
	hc := controlClient(t)
	for range 3 {
		calls(t, eastC, "mock-a", 1)
	}
	converse(t.Context(), westC, "mock-a", withTier(input("", "hi"), types.ServiceTierTypeFlex))
	converse(t.Context(), westC, profileWest, withTier(input("", "hi"), types.ServiceTierTypeFlex))
	_ = srv.SetFault(mockmodel.Fault{Region: west, ThrottlePercent: 100})
	calls(t, westC, "mock-b", 1)
	srv.ClearFaults()
	waitFor(t, func() bool { return srv.Active() == 0 }, "handlers to return")

	_, body := do(t, hc, http.MethodGet, url+"/stats", "")
	var st mockmodel.Stats
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	want := mockmodel.Stats{
		Requests:            map[string]int64{"mock-a": 4, profileWest: 1, "mock-b": 1},
		ByRegion:            map[string]map[string]int64{east: {"mock-a": 3}, west: {"mock-a": 1, profileWest: 1, "mock-b": 1}},
		ThrottledByRegion:   map[string]int64{west: 1},
		UnavailableByRegion: map[string]int64{},
		ByTier:              map[string]int64{"flex": 2},
		ByProfile:           map[string]int64{profileWest: 1},
	}
	if fmt.Sprint(st) != fmt.Sprint(want) {
		t.Errorf("GET /stats %s\nwant %+v", body, want)
	}
	for _, key := range []string{`"by_region":{`, `"throttled_by_region":{`, `"by_tier":{"flex":2}`, `"by_profile":{`} {
		if !strings.Contains(body, key) {
			t.Errorf("GET /stats %s: no %s", body, key)
		}
	}
	if code, _ := do(t, hc, http.MethodPost, url+"/stats/reset", ""); code != http.StatusNoContent {
		t.Errorf("reset: %d", code)
	}
	_, body = do(t, hc, http.MethodGet, url+"/stats", "")
	const empty = `{"requests":{},"active":0,"abandoned":0,"by_region":{},"throttled_by_region":{},"unavailable_by_region":{},"by_tier":{},"by_profile":{}}`
	if strings.TrimSpace(body) != empty {
		t.Errorf("after reset: %s", body)
	}
}
