package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/jetway-gateway/jetway/internal/mockmodel"
)

// responsesKey is the fleet's reasoning key in these tests.
const responsesKey = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// responsesClient is openai-go pointed at a gateway, the JWT its API key.
func responsesClient(addr, token string) oai.Client {
	return oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// TestResponsesGoStreamEqualsWebSocket: openai-go's New and NewStreaming
// get the answer /v1/ws gives for the same prompt; the stream's events
// come in OpenAI's order with contiguous sequence numbers from 0.
func TestResponsesGoStreamEqualsWebSocket(t *testing.T) {
	w := newWorld(t, fastPace())
	cl := w.cluster(1, map[string]string{"JETWAY_RESPONSES_REASONING_KEY": responsesKey})
	g := cl.servers[0]
	prompt := "the same prompt through the responses door"
	wsCall, err := w.dial(g.gw, "resp-user", nil).Send(context.Background(), ask(prompt))
	if err != nil {
		fatalAPI(t, err)
	}
	wsDone, err := waitCall(t, wsCall, 30*time.Second)
	if err != nil {
		fatalAPI(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := responsesClient(g.Addr, w.token("resp-user", "contoso", "contoso-support", time.Hour))
	res, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "mock-a",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String(prompt)}})
	if err != nil {
		fatalAPI(t, err)
	}
	if res.OutputText() != wsDone.Text || res.Status != "completed" || res.Usage.OutputTokens != 300 {
		t.Fatalf("New: %q (%s, %d tokens)\n/v1/ws: %q", res.OutputText(), res.Status, res.Usage.OutputTokens, wsDone.Text)
	}
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "mock-a",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String(prompt)}})
	var types []string
	var text strings.Builder
	var final responses.Response
	for n := 0; st.Next(); n++ {
		ev := st.Current()
		if int(ev.SequenceNumber) != n {
			t.Fatalf("event %d (%s) has sequence_number %d", n, ev.Type, ev.SequenceNumber)
		}
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if strings.Join(types, " ") != want {
		t.Errorf("events %v", types)
	}
	if text.String() != wsDone.Text || final.OutputText() != wsDone.Text || final.Usage.OutputTokens != 300 {
		t.Errorf("streamed %q, final %q", text.String(), final.OutputText())
	}
}

// TestResponsesGoChainsAcrossServers: a function-tool round trip by
// previous_response_id on another server (the store is the requests
// table), and with the full input passed back (store:false); the stored
// response, its input items and its deletion.
func TestResponsesGoChainsAcrossServers(t *testing.T) {
	w := newWorld(t, fastPace())
	cl := w.cluster(2, map[string]string{"JETWAY_RESPONSES_REASONING_KEY": responsesKey})
	tok := w.token("chain-user", "contoso", "contoso-agent", time.Hour)
	a, b := responsesClient(cl.servers[0].Addr, tok), responsesClient(cl.servers[1].Addr, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "lookup",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}}},
		{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}
	var raw *http.Response
	first, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "mock-tools", Tools: tools,
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("look up the weather")}}, option.WithResponseInto(&raw))
	if err != nil {
		fatalAPI(t, err)
	}
	if raw.Header.Get("x-jetway-dropped-tools") != "web_search" {
		t.Errorf("dropped tools header %q", raw.Header.Get("x-jetway-dropped-tools"))
	}
	call := functionCall(t, first)
	// By previous_response_id on the other server: only the output.
	second, err := b.Responses.New(ctx, responses.ResponseNewParams{Model: "mock-tools", Tools: tools[:1],
		PreviousResponseID: oai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			fcOutput(call.CallID, "sunny")}}})
	if err != nil {
		fatalAPI(t, err)
	}
	if second.Status != "completed" || second.PreviousResponseID != first.ID || second.Usage.InputTokens <= first.Usage.InputTokens {
		t.Errorf("second %s, previous %q, input tokens %d after %d", second.Status, second.PreviousResponseID,
			second.Usage.InputTokens, first.Usage.InputTokens)
	}
	// With the full input, nothing stored.
	full, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "mock-tools", Tools: tools[:1], Store: oai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("look up the weather", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name),
			fcOutput(call.CallID, "sunny")}}})
	if err != nil {
		fatalAPI(t, err)
	}
	if full.Status != "completed" || !strings.Contains(full.RawJSON(), `"store":false`) {
		t.Errorf("full input: %s", full.RawJSON())
	}
	var nf *oai.Error
	if _, err := b.Responses.Get(ctx, full.ID, responses.ResponseGetParams{}); !errors.As(err, &nf) || nf.StatusCode != 404 {
		t.Errorf("GET of a store:false response: %v", err)
	}
	// Stored: GET and input_items on the other server, then DELETE.
	got, err := b.Responses.Get(ctx, second.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != second.OutputText() || got.PreviousResponseID != first.ID {
		t.Fatalf("GET: %v %+v", err, got)
	}
	items, err := b.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 || items.Data[0].Type != "function_call_output" {
		t.Fatalf("input_items: %v %+v", err, items)
	}
	other := responsesClient(cl.servers[1].Addr, w.token("another-user", "contoso", "contoso-agent", time.Hour))
	if _, err := other.Responses.Get(ctx, second.ID, responses.ResponseGetParams{}); !errors.As(err, &nf) || nf.StatusCode != 404 {
		t.Errorf("another user's GET: %v", err)
	}
	if _, err := other.Responses.New(ctx, responses.ResponseNewParams{Model: "mock-tools", PreviousResponseID: oai.String(second.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("steal")}}); !errors.As(err, &nf) || nf.StatusCode != 400 || nf.Param != "previous_response_id" {
		t.Errorf("another user's previous_response_id: %v", err)
	}
	if err := a.Responses.Delete(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Responses.Get(ctx, second.ID, responses.ResponseGetParams{}); !errors.As(err, &nf) || nf.StatusCode != 404 {
		t.Errorf("GET after DELETE: %v", err)
	}
}

func fcOutput(callID, output string) responses.ResponseInputItemUnionParam {
	it := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	it.OfFunctionCallOutput.CallID = oai.String(callID)
	return it
}

func functionCall(t *testing.T, r *responses.Response) responses.ResponseOutputItemUnion {
	t.Helper()
	for _, it := range r.Output {
		if it.Type == "function_call" {
			return it
		}
	}
	t.Fatalf("no function_call in %s", r.RawJSON())
	return responses.ResponseOutputItemUnion{}
}

// TestResponsesGoBackgroundResumeAndKill: a background response resumed
// from starting_after on another server gets the same events as a full
// replay; one whose owner is SIGKILLed mid-answer ends on a survivor as
// response.incomplete (interrupted) with the text saved; a background
// response is cancelled from another server.
func TestResponsesGoBackgroundResumeAndKill(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 10 * time.Millisecond})
	cl := w.cluster(3, map[string]string{"JETWAY_RESPONSES_REASONING_KEY": responsesKey})
	tok := w.token("bg-user", "contoso", "contoso-support", time.Hour)
	clients := []oai.Client{responsesClient(cl.servers[0].Addr, tok), responsesClient(cl.servers[1].Addr, tok), responsesClient(cl.servers[2].Addr, tok)}
	client := func(i int) *oai.Client { return &clients[i] }
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bg, err := client(0).Responses.New(ctx, responses.ResponseNewParams{Model: "mock-a", Background: oai.Bool(true),
		MaxOutputTokens: oai.Int(60), Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("a background answer")}})
	if err != nil {
		fatalAPI(t, err)
	}
	if bg.Status != "in_progress" || !bg.Background {
		t.Fatalf("background answer %s", bg.RawJSON())
	}
	all := sseEvents(t, ctx, cl.servers[1].Addr, tok, bg.ID, -1)
	tail := sseEvents(t, ctx, cl.servers[2].Addr, tok, bg.ID, 10)
	if len(all) < 20 || strings.Join(tail, "") != strings.Join(all[11:], "") {
		t.Fatalf("resume after 10 on another server: %d events, full replay %d", len(tail), len(all))
	}
	if !strings.Contains(all[len(all)-1], `"response.incomplete"`) || !strings.Contains(all[len(all)-1], `"max_output_tokens"`) {
		t.Errorf("last event %s", all[len(all)-1])
	}
	// openai-go's GetStreaming does the same resume.
	st := client(1).Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{StartingAfter: oai.Int(10)})
	n := 0
	for st.Next() {
		if int(st.Current().SequenceNumber) != 11+n {
			t.Fatalf("GetStreaming event %d has sequence_number %d", n, st.Current().SequenceNumber)
		}
		n++
	}
	if st.Err() != nil || n != len(tail) {
		t.Errorf("GetStreaming: %v, %d events", st.Err(), n)
	}

	// The owner is SIGKILLed mid-answer: a survivor ends it.
	long, err := client(2).Responses.New(ctx, responses.ResponseNewParams{Model: "mock-a", Background: oai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("a long background answer")}})
	if err != nil {
		fatalAPI(t, err)
	}
	partial := sseEventsUntil(t, ctx, cl.servers[2].Addr, tok, long.ID, 80) // past a checkpoint (300 ms)
	cl.servers[2].signal(syscall.SIGKILL)
	cl.servers[2].wait(t, 20*time.Second)
	rest := sseEvents(t, ctx, cl.servers[0].Addr, tok, long.ID, len(partial)-1)
	if len(rest) == 0 {
		t.Fatal("the resume after the owner's SIGKILL ended with no event")
	}
	last := rest[len(rest)-1]
	if !strings.Contains(last, `"response.incomplete"`) || !strings.Contains(last, `"interrupted"`) {
		t.Fatalf("after the owner's SIGKILL the stream ended with %s", last)
	}
	got, err := client(1).Responses.Get(ctx, long.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != "incomplete" || got.IncompleteDetails.Reason != "interrupted" || got.OutputText() == "" {
		t.Errorf("GET after the kill: %v %s", err, got.RawJSON())
	}

	// Cancel from another server.
	run, err := client(0).Responses.New(ctx, responses.ResponseNewParams{Model: "mock-a", Background: oai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("an answer to cancel")}})
	if err != nil {
		fatalAPI(t, err)
	}
	sseEventsUntil(t, ctx, cl.servers[0].Addr, tok, run.ID, 8)
	cancelled, err := client(1).Responses.Cancel(ctx, run.ID)
	if err != nil || cancelled.Status != "cancelled" {
		t.Fatalf("cancel from another server: %v %s", err, cancelled.RawJSON())
	}
	fg, err := client(0).Responses.New(ctx, responses.ResponseNewParams{Model: "mock-a", MaxOutputTokens: oai.Int(5),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("not background")}})
	if err != nil {
		fatalAPI(t, err)
	}
	var bad *oai.Error
	if _, err := client(1).Responses.Cancel(ctx, fg.ID); !errors.As(err, &bad) || bad.StatusCode != 400 {
		t.Errorf("cancel of a foreground response: %v", err)
	}
	// starting_after past the end, and negative.
	for _, q := range []string{"starting_after=100000", "starting_after=-1"} {
		status, body := getRaw(t, ctx, cl.servers[0].Addr, tok, "/v1/responses/"+bg.ID+"?stream=true&"+q)
		if status != 400 || !strings.Contains(body, `"param":"starting_after"`) {
			t.Errorf("%s: %d %s", q, status, body)
		}
	}
}

// sseEvents reads a response's events after sequence_number `after` (-1:
// all) with GET ?stream=true, each event's SSE text.
func sseEvents(t *testing.T, ctx context.Context, addr, tok, id string, after int) []string {
	t.Helper()
	return readEvents(t, ctx, addr, tok, id, after, -1)
}

// sseEventsUntil reads the first n events of a response, then hangs up.
func sseEventsUntil(t *testing.T, ctx context.Context, addr, tok, id string, n int) []string {
	t.Helper()
	return readEvents(t, ctx, addr, tok, id, -1, n)
}

func readEvents(t *testing.T, ctx context.Context, addr, tok, id string, after, limit int) []string {
	t.Helper()
	url := "http://" + addr + "/v1/responses/" + id + "?stream=true"
	if after >= 0 {
		url += "&starting_after=" + strconv.Itoa(after)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fatalAPI(t, err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	var events []string
	var cur strings.Builder
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		cur.WriteString(line + "\n")
		if line == "" {
			events = append(events, cur.String())
			cur.Reset()
			if limit > 0 && len(events) == limit {
				return events
			}
		}
	}
	if limit > 0 {
		t.Fatalf("the stream ended after %d events, before %d", len(events), limit)
	}
	return events
}

func getRaw(t *testing.T, ctx context.Context, addr, tok, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fatalAPI(t, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestResponsesWebSocketModeGo: openai-go's own Responses WebSocket client
// runs 20 chained turns with tool calls, each sending only its new input
// and previous_response_id (store:false: the socket's memory); then the
// socket drops mid-turn, and a socket to another server finishes the
// turn (response.resume from the last sequence_number received) and
// continues the chain (the store).
func TestResponsesWebSocketModeGo(t *testing.T) {
	w := newWorld(t, mockmodel.Options{TTFT: time.Millisecond, PerToken: 5 * time.Millisecond})
	cl := w.cluster(2, map[string]string{"JETWAY_RESPONSES_REASONING_KEY": responsesKey})
	tok := w.token("wsmode-user", "contoso", "contoso-agent", time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c0 := responsesClient(cl.servers[0].Addr, tok)
	conn, err := c0.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
	if err != nil {
		fatalAPI(t, err)
	}
	defer conn.Close()
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}`)}
	create := func(c *responses.ResponseConnection, prev string, input any) {
		t.Helper()
		ev := map[string]any{"type": "response.create", "model": "mock-tools", "store": false, "tools": tools, "input": input,
			"max_output_tokens": 40}
		if prev != "" {
			ev["previous_response_id"] = prev
		}
		b, _ := json.Marshal(ev)
		if err := c.SendRaw(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// turn reads one response's events to its end: its id, its function
	// call's id, and the last sequence_number read (stopAt > 0: hang up
	// after that many events).
	type turnEnd struct {
		id, callID  string
		first, last int
		completed   bool
		inputTok    int64
	}
	turn := func(c *responses.ResponseConnection, stopAt int) turnEnd {
		t.Helper()
		var end turnEnd
		for n := 0; ; n++ {
			ev := recvEvent(t, ctx, c)
			if ev.Type == "error" {
				t.Fatalf("error event: %+v", ev)
			}
			if n == 0 {
				end.first = ev.Seq
			}
			end.last = ev.Seq
			if ev.Type == "response.created" {
				end.id = ev.Response.ID
			}
			if ev.Type == "response.output_item.done" && ev.Item.Type == "function_call" {
				end.callID = ev.Item.CallID
			}
			if ev.Type == "response.completed" || ev.Type == "response.incomplete" {
				end.completed, end.inputTok = true, ev.Response.Usage.InputTokens
				return end
			}
			if stopAt > 0 && n+1 == stopAt {
				return end
			}
		}
	}
	// next is a turn's new input: the output of the call it made, else
	// a user message.
	next := func(end turnEnd, i int) []any {
		if end.callID != "" {
			return []any{map[string]any{"type": "function_call_output", "call_id": end.callID, "output": "result " + strconv.Itoa(i)}}
		}
		return []any{map[string]any{"type": "message", "role": "user", "content": "go on " + strconv.Itoa(i)}}
	}
	create(conn, "", "start the tool loop")
	end := turn(conn, 0)
	prevTokens, calls := end.inputTok, 0
	for i := 1; i < 20; i++ {
		if end.callID != "" {
			calls++
		}
		create(conn, end.id, next(end, i))
		end = turn(conn, 0)
		if !end.completed || end.inputTok <= prevTokens {
			t.Fatalf("turn %d: input tokens %d after %d (the chain did not grow)", i, end.inputTok, prevTokens)
		}
		prevTokens = end.inputTok
	}
	if calls < 5 {
		t.Fatalf("%d of 20 turns called the tool", calls)
	}
	// Turn 20 starts; after a few of its events the SDK's own recovery
	// (Recover: a new connection, then its Restore) resumes the turn on
	// the same server.
	create(conn, end.id, next(end, 20))
	cut := turn(conn, 5)
	// Recover retires the socket mid-turn (the server sees it go) and
	// opens another.
	conn, err = conn.Recover(ctx, responses.ResponseRecoveryOptions{MaxAttempts: 3, RetryDelay: 100 * time.Millisecond,
		Restore: func(ctx context.Context, c *responses.ResponseConnection) error {
			b, _ := json.Marshal(map[string]any{"type": "response.resume", "response_id": cut.id, "starting_after": cut.last})
			return c.SendRaw(ctx, b)
		}})
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	recovered := turn(conn, 0)
	if recovered.first != cut.last+1 || !recovered.completed {
		t.Fatalf("the recovered turn: %+v after %d", recovered, cut.last)
	}
	// Turn 21 starts; the socket drops again, and a socket to another
	// server finishes it.
	create(conn, cut.id, next(recovered, 21))
	cut = turn(conn, 5)
	conn.Abort()
	c1 := responsesClient(cl.servers[1].Addr, tok)
	conn2, err := c1.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
	if err != nil {
		fatalAPI(t, err)
	}
	defer conn2.Close()
	resume, _ := json.Marshal(map[string]any{"type": "response.resume", "response_id": cut.id, "starting_after": cut.last})
	if err := conn2.SendRaw(ctx, resume); err != nil {
		t.Fatal(err)
	}
	finished := turn(conn2, 0)
	if finished.first != cut.last+1 || !finished.completed {
		t.Fatalf("the resumed turn did not complete with its call: %+v", finished)
	}
	// The chain goes on from the store on this server.
	create(conn2, cut.id, next(finished, 22))
	after := turn(conn2, 0)
	if !after.completed || after.inputTok <= prevTokens {
		t.Fatalf("the chain on another server: %+v (input tokens before %d)", after, prevTokens)
	}
	// One at a time: a second create while one is in flight is refused,
	// and the first goes on.
	create(conn2, after.id, next(after, 23))
	create(conn2, after.id, next(after, 24))
	var refused, completed bool
	for !completed {
		raw, err := conn2.RecvRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		refused = refused || e.Type == "error" && e.Error.Code == "response_in_flight"
		completed = e.Type == "response.completed" || e.Type == "response.incomplete"
	}
	if !refused {
		t.Error("a second response.create in flight was not refused")
	}
}

// wsEvent is the part of a WebSocket mode event the tests read.
type wsEvent struct {
	Type     string `json:"type"`
	Seq      int    `json:"sequence_number"`
	Response struct {
		ID    string `json:"id"`
		Usage struct {
			InputTokens int64 `json:"input_tokens"`
		} `json:"usage"`
	} `json:"response"`
	Item struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
	} `json:"item"`
	Error struct {
		Code string `json:"code"`
	} `json:"error"`
}

func recvEvent(t *testing.T, ctx context.Context, c *responses.ResponseConnection) wsEvent {
	t.Helper()
	raw, err := c.RecvRaw(ctx)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	var ev wsEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("event %s: %v", raw, err)
	}
	return ev
}

// fatalAPI fails with an API error's body.
func fatalAPI(t *testing.T, err error) {
	t.Helper()
	var e *oai.Error
	if errors.As(err, &e) {
		t.Fatalf("%v: %s", err, e.RawJSON())
	}
	t.Fatal(err)
}
