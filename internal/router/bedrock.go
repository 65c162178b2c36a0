// Package router calls models for the gateway: the Bedrock adapter turns a
// ConverseStream into ordered text deltas and classified errors, and the
// routing policy walks a chain of models, falling back before the first token.
package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/eventstream"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"
)

// Message is one turn of the conversation: Content, or Blocks when set.
type Message struct {
	Role    string // "user" or "assistant"
	Content string
	Blocks  []Block
}

// Guardrail names a Bedrock guardrail to apply to a call.
type Guardrail struct {
	ID      string
	Version string
	// StreamMode is "sync" or "async" (Bedrock's streamProcessingMode);
	// empty leaves Bedrock's default (sync).
	StreamMode string
}

// Call is one model request.
type Call struct {
	ModelID string // the Bedrock model id (or inference profile / ARN)
	// Region and RoleARN say where the call goes: "" is the default
	// client's region and credentials (the Router sets both from the
	// target's placement).
	Region, RoleARN string
	// ServiceTier is Bedrock's serviceTier for the call; "": none named.
	ServiceTier string
	// Affinity is the conversation's key (the gateway's: tenant, app,
	// user and the conversation's first turn): the Router keeps a
	// conversation on one placement of a model while it answers.
	Affinity    string
	System      string // empty: no system prompt
	Messages    []Message
	MaxTokens   int      // 0: the model's default
	Temperature *float64 // nil: the model's default
	TopP        *float64 // nil: the model's default
	Stop        []string // stop sequences; none by default
	Guardrail   *Guardrail

	Tools      []Tool      // none: no toolConfig (unless the messages hold tool blocks)
	ToolChoice *ToolChoice // nil: Bedrock's default (auto)
	// ReasoningBudget, when > 0, asks for reasoning with that many tokens
	// (additionalModelRequestFields.thinking, Anthropic's form).
	ReasoningBudget int
	// PrefixCachePoint marks a cache point after the system prompt and
	// tools (at the end of the system prompt, else of the tools).
	// Message cache points are blocks of kind BlockCachePoint.
	PrefixCachePoint bool
	// AutoCache asks the Router to place cache points where the prefix is
	// stable (the app's prompt_cache auto; see placeCachePoints).
	AutoCache bool
	// OnBlock, when set, puts the call in block mode: every delta (text
	// too, with its block index), tool-use start and reasoning signature
	// is delivered to it in order, and onDelta is not called. Unset, only
	// text deltas are streamed (through onDelta), as for any text-only call.
	OnBlock func(BlockDelta)
}

// Usage is what the model reports it consumed. InputTokens are the input
// tokens not read from or written to the prompt cache (Bedrock's split).
type Usage struct {
	InputTokens, OutputTokens                   int
	CacheReadInputTokens, CacheWriteInputTokens int
}

// Result is how a successful call ended.
type Result struct {
	Usage Usage
	// UsageReported is false when the stream ended without a metadata event;
	// the caller then estimates usage itself.
	UsageReported bool
	// StopReason is Bedrock's: end_turn, max_tokens, stop_sequence,
	// guardrail_intervened, content_filtered, ...
	StopReason string
	// ServiceTier is the tier Bedrock reported serving the call in (its
	// metadata event's serviceTier); "": it reported none.
	ServiceTier string
}

// Bedrock calls models through the Bedrock runtime ConverseStream API,
// with one client per region and account (role), each made once, on
// first use, from the default client's options.
type Bedrock struct {
	client *bedrockruntime.Client
	roles  func(roleARN string) aws.CredentialsProvider

	mu      sync.Mutex
	clients map[clientKey]modelClient
	creds   map[string]aws.CredentialsProvider // by role ARN, shared by its regions
}

// modelClient is one region's and role's client and, when its calls
// need nothing of the SDK's stack, the same calls prepared (see direct).
type modelClient struct {
	sdk    *bedrockruntime.Client
	direct *direct
}

// clientKey names a client: a region and a role ("" for the defaults).
type clientKey struct{ region, role string }

// NewBedrock returns an adapter over client, which the caller builds (cmd
// wiring: config.LoadDefaultConfig, so AWS_ENDPOINT_URL_BEDROCK_RUNTIME can
// point it at the mock endpoint).
//
// The caller must set the client's RetryMaxAttempts, and should set it to 1.
// The SDK retries throttling and 5xx answers before the stream opens, with
// backoff of up to 20 s; from the outside that is indistinguishable from a
// slow first token, which is exactly the hidden queue the gateway exists to
// remove. With one attempt a throttled model fails at once with ErrThrottled
// and the router falls back to the next model, or tells the client.
// At one attempt a client's calls skip the SDK's middleware stack (see
// direct): the same request, signature and errors, prepared once.
func NewBedrock(client *bedrockruntime.Client) *Bedrock {
	return &Bedrock{client: client, clients: map[clientKey]modelClient{{}: {client, newDirect(client.Options())}},
		creds: map[string]aws.CredentialsProvider{}}
}

// AssumeRoles sets how a call with a RoleARN gets its credentials
// (cmd wiring: stscreds.NewAssumeRoleProvider over the task role, in a
// credentials cache). Unset, such a call fails with ErrAccessDenied. Call
// it before the first Stream.
func (b *Bedrock) AssumeRoles(f func(roleARN string) aws.CredentialsProvider) { b.roles = f }

// errNoRoles is the error of a call to another account without AssumeRoles.
var errNoRoles = errors.New("no role credentials: the gateway cannot assume roles")

// clientFor is the client of a region and role, made once.
func (b *Bedrock) clientFor(region, role string) (modelClient, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := clientKey{region, role}
	if c, ok := b.clients[k]; ok {
		return c, nil
	}
	o := b.client.Options()
	if region != "" {
		o.Region = region
	}
	if role != "" {
		if b.roles == nil {
			return modelClient{}, errNoRoles
		}
		cp, ok := b.creds[role]
		if !ok {
			cp = b.roles(role)
			b.creds[role] = cp
		}
		o.Credentials = cp
	}
	c := bedrockruntime.New(o)
	mc := modelClient{c, newDirect(c.Options())}
	b.clients[k] = mc
	return mc, nil
}

// errNoStop is the error of a stream that ended without a messageStop event:
// the SDK treats a connection cut between two events as a clean end.
var errNoStop = errors.New("bedrock stream ended without messageStop")

// Stream calls ConverseStream and calls onDelta for every text delta, in
// order, on the calling goroutine. It returns when the stream has ended,
// failed, or ctx has ended (promptly: it does not wait for the model).
//
// Errors are *ModelError, matched with errors.Is against the sentinels:
// ErrCanceled when ctx was canceled and ErrTimeout when its deadline passed
// (before or after the first delta); otherwise ErrMidStream for any failure
// after at least one delta; otherwise ErrThrottled, ErrNotReady,
// ErrUnavailable, ErrValidation, ErrAccessDenied or ErrTimeout by the Bedrock
// error type (or HTTP status). A stream that ends without a messageStop
// event is a failure (ErrMidStream, or ErrUnavailable before any delta).
// The Result holds what was known when an error happened.
func (b *Bedrock) Stream(ctx context.Context, c Call, onDelta func(text string)) (Result, error) {
	in, err := converseInput(c)
	if err != nil {
		return Result{}, &ModelError{Kind: KindValidation, Model: c.ModelID, Err: fmt.Errorf("%w: %w", ErrValidation, err)}
	}
	client, err := b.clientFor(c.Region, c.RoleARN)
	if err != nil {
		return Result{}, &ModelError{Kind: KindAccessDenied, Model: c.ModelID, Err: fmt.Errorf("%w: %w", ErrAccessDenied, err)}
	}
	var body io.ReadCloser
	if client.direct != nil {
		if body, err = client.direct.call(ctx, in); err != nil {
			return Result{}, classify(ctx, c.ModelID, false, err)
		}
	} else {
		tap := &bodyTap{}
		out, err := client.sdk.ConverseStream(ctx, in, sdkWorkarounds, tap.install)
		if err != nil {
			return Result{}, classify(ctx, c.ModelID, false, err)
		}
		// The SDK's own reader got an empty body and ends at once; the
		// events are read below from the real one.
		_ = out.GetStream().Close()
		if tap.body == nil {
			return Result{}, classify(ctx, c.ModelID, false, errNoBody)
		}
		body = tap.body
	}
	defer body.Close()
	bufs := eventBufferPool.Get().(*eventBuffers)
	bufs.r.Reset(body)
	res, err := readEvents(ctx, c.ModelID, bufs, onDelta, c.OnBlock)
	bufs.r.Reset(nil)
	if err == nil {
		// Nothing read out of the buffers outlives a stream that ended
		// well (texts and results are copies); an error may hold bytes
		// of an event, so its buffers are left to the collector.
		eventBufferPool.Put(bufs)
	}
	return res, err
}

// eventBuffers are the buffers of one stream's reading: the read buffer
// under the decoder and the message buffer it reuses. Every model call
// needs them for its length only, so they are pooled.
type eventBuffers struct {
	r       *bufio.Reader
	payload []byte
}

var eventBufferPool = sync.Pool{New: func() any {
	return &eventBuffers{r: bufio.NewReaderSize(nil, eventReadBuffer), payload: make([]byte, 0, eventPayloadBuffer)}
}}

// eventReadBuffer is the read buffer under the event-stream decoder, which
// reads each message in two pieces (its prelude, then the rest): one read
// of the body fills it with whole messages. A few deltas
// fit in 4 KiB.
const eventReadBuffer = 4 << 10

// eventPayloadBuffer is the message buffer the decoder reuses: a delta's
// message is far smaller, so 2 KiB holds any usual event without
// reallocating. A larger event's buffer is kept, up to maxKeptPayload.
const (
	eventPayloadBuffer = 2 << 10
	maxKeptPayload     = 64 << 10
)

// errNoBody is the error of a successful ConverseStream response whose body
// the tap did not see (the SDK changed how it calls its HTTP client).
var errNoBody = errors.New("bedrock event stream body not captured")

// readEvents decodes a ConverseStream body on the calling goroutine with
// decodeEvent (the event-stream framing, CRCs and headers, as
// smithy-go/eventstream checks them, with no allocation per message:
// smithy-go's decoder made a string per header name and value, a map
// entry per header and a CRC hash, readers and buffers per message, 30
// allocations per token) and encoding/json for the three events the
// gateway uses (contentBlockDelta, messageStop, metadata), reusing one
// message buffer; a text delta in the usual form is read by deltaText
// instead (one allocation, its text, where encoding/json made seven).
// The SDK's reader would hand every event through two goroutines and two
// channels (its EventStreamReader and the ConverseStream pipe), and its
// schema-driven deserializer allocates a new payload buffer and a stack of
// decoders per event: per token that was two wake-ups and most of the
// adapter's allocations. Exception and error messages, rare, still go
// through the SDK's codec so they become its typed errors
// (*types.ThrottlingException, ...) exactly as before. Like the SDK, a body
// that ends (even inside a message) ends the stream; without messageStop
// that is errNoStop.
//
// With onBlock set (block mode), contentBlockStart and every kind of
// delta go to it instead (see Call.OnBlock).
func readEvents(ctx context.Context, model string, bufs *eventBuffers, onDelta func(text string), onBlock func(BlockDelta)) (Result, error) {
	body, buf := bufs.r, bufs.payload
	var res Result
	streamed, stopped := false, false
	var delta deltaEvent
	for {
		msg, grown, err := decodeEvent(body, buf)
		if c := cap(grown); c > cap(buf) && c <= maxKeptPayload {
			buf, bufs.payload = grown, grown
		}
		if err != nil {
			if (err == io.EOF || err == io.ErrUnexpectedEOF) && ctx.Err() == nil {
				if !stopped {
					return res, classify(ctx, model, streamed, errNoStop)
				}
				return res, nil
			}
			return res, classify(ctx, model, streamed, fmt.Errorf("decode event: %w", err))
		}
		if string(msg.messageType) != eventstream.EventMessageType {
			return res, classify(ctx, model, streamed, sdkError(msg))
		}
		payload := msg.payload
		switch string(msg.eventType) {
		case "contentBlockDelta":
			if onBlock != nil {
				d, ok, err := decodeBlockDelta(payload)
				if err != nil {
					return res, classify(ctx, model, streamed, fmt.Errorf("deserialize event contentBlockDelta: %w", err))
				}
				if ok {
					streamed = true
					onBlock(d)
				}
				continue
			}
			text, ok := deltaText(payload)
			if !ok {
				delta.Delta.Text = ""
				if err := json.Unmarshal(payload, &delta); err != nil {
					return res, classify(ctx, model, streamed, fmt.Errorf("deserialize event contentBlockDelta: %w", err))
				}
				text = delta.Delta.Text
			}
			if text != "" {
				streamed = true
				onDelta(text)
			}
		case "contentBlockStart":
			if onBlock == nil {
				continue
			}
			d, ok, err := decodeBlockStart(payload)
			if err != nil {
				return res, classify(ctx, model, streamed, fmt.Errorf("deserialize event contentBlockStart: %w", err))
			}
			if ok {
				streamed = true
				onBlock(d)
			}
		case "messageStop":
			var stop struct {
				StopReason string `json:"stopReason"`
			}
			if err := json.Unmarshal(payload, &stop); err != nil {
				return res, classify(ctx, model, streamed, fmt.Errorf("deserialize event messageStop: %w", err))
			}
			stopped = true
			res.StopReason = stop.StopReason
		case "metadata":
			var meta struct {
				Usage *struct {
					InputTokens           int `json:"inputTokens"`
					OutputTokens          int `json:"outputTokens"`
					CacheReadInputTokens  int `json:"cacheReadInputTokens"`
					CacheWriteInputTokens int `json:"cacheWriteInputTokens"`
				} `json:"usage"`
				ServiceTier *struct {
					Type string `json:"type"`
				} `json:"serviceTier"`
			}
			if err := json.Unmarshal(payload, &meta); err != nil {
				return res, classify(ctx, model, streamed, fmt.Errorf("deserialize event metadata: %w", err))
			}
			if u := meta.Usage; u != nil {
				res.UsageReported = true
				res.Usage = Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
					CacheReadInputTokens: u.CacheReadInputTokens, CacheWriteInputTokens: u.CacheWriteInputTokens}
			}
			if st := meta.ServiceTier; st != nil {
				res.ServiceTier = st.Type
			}
		}
	}
}

// deltaEvent is the part of a contentBlockDelta event the gateway uses:
// text deltas (tool use and reasoning deltas leave Text empty).
type deltaEvent struct {
	Delta struct {
		Text string `json:"text"`
	} `json:"delta"`
}

// sdkError turns an exception or error message into the error the SDK's
// own reader reports for it: the message's bytes are read by the SDK's
// codec with the Bedrock schemas and type registry.
func sdkError(msg rawEvent) error {
	_, err := restjson1.New(schemas.AmazonBedrockFrontendService).DeserializeEventMessage(
		schemas.ConverseStreamOutput, bedrockruntime.TypeRegistry, bytes.NewReader(msg.raw))
	if err == nil {
		err = fmt.Errorf("bedrock %s message the SDK read as an event", msg.messageType)
	}
	return err
}

// bodyTap takes the body of a successful ConverseStream response for
// readEvents and gives the SDK an empty one. Error answers pass untouched:
// the SDK turns them into its typed errors.
type bodyTap struct {
	client bedrockruntime.HTTPClient
	body   io.ReadCloser
}

// install is a per-call option; it goes after sdkWorkarounds.
func (t *bodyTap) install(o *bedrockruntime.Options) {
	if o.HTTPClient == nil {
		o.HTTPClient = awshttp.NewBuildableClient()
	}
	t.client = o.HTTPClient
	o.HTTPClient = t
}

func (t *bodyTap) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.client.Do(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		if t.body != nil {
			_ = t.body.Close()
		}
		t.body, resp.Body = resp.Body, http.NoBody
	}
	return resp, err
}

func converseInput(c Call) (*bedrockruntime.ConverseStreamInput, error) {
	in := &bedrockruntime.ConverseStreamInput{
		ModelId:  aws.String(c.ModelID),
		Messages: make([]types.Message, len(c.Messages)),
	}
	if c.System != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: c.System}}
	}
	for i, m := range c.Messages {
		content := []types.ContentBlock{&types.ContentBlockMemberText{Value: m.Content}}
		if m.Blocks != nil {
			var err error
			if content, err = contentBlocks(m.Blocks); err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
		}
		in.Messages[i] = types.Message{Role: types.ConversationRole(m.Role), Content: content}
	}
	if len(c.Tools) > 0 {
		tc, err := toolConfig(c.Tools, c.ToolChoice)
		if err != nil {
			return nil, err
		}
		in.ToolConfig = tc
	}
	if c.PrefixCachePoint {
		switch {
		case in.System != nil:
			in.System = append(in.System, &types.SystemContentBlockMemberCachePoint{Value: cachePoint})
		case in.ToolConfig != nil:
			in.ToolConfig.Tools = append(in.ToolConfig.Tools, &types.ToolMemberCachePoint{Value: cachePoint})
		}
	}
	if c.ReasoningBudget > 0 {
		in.AdditionalModelRequestFields = reasoningFields(c.ReasoningBudget)
	}
	if c.MaxTokens > 0 || c.Temperature != nil || c.TopP != nil || len(c.Stop) > 0 {
		ic := &types.InferenceConfiguration{StopSequences: c.Stop}
		if c.MaxTokens > 0 {
			ic.MaxTokens = aws.Int32(int32(min(c.MaxTokens, math.MaxInt32)))
		}
		if c.Temperature != nil {
			ic.Temperature = aws.Float32(float32(*c.Temperature))
		}
		if c.TopP != nil {
			ic.TopP = aws.Float32(float32(*c.TopP))
		}
		in.InferenceConfig = ic
	}
	if c.ServiceTier != "" {
		in.ServiceTier = &types.ServiceTier{Type: types.ServiceTierType(c.ServiceTier)}
	}
	if g := c.Guardrail; g != nil {
		in.GuardrailConfig = &types.GuardrailStreamConfiguration{
			GuardrailIdentifier:  aws.String(g.ID),
			GuardrailVersion:     aws.String(g.Version),
			StreamProcessingMode: types.GuardrailStreamProcessingMode(g.StreamMode),
		}
	}
	return in, nil
}

// sdkWorkarounds is a per-call option for two defects of smithy-go v1.28.9
// (the newest at the time of writing) that the mock endpoint exposed:
//
//  1. A client's restJson1 protocol keeps one event stream codec whose
//     decoder and payload buffer every open stream writes: concurrent
//     ConverseStream calls on one client race (go test -race reports it). A
//     protocol of its own per call gives each stream its own codec.
//  2. The SDK wraps the request body in a reader whose WriteTo returns
//     io.EOF once the SDK has closed it, which it does as soon as the
//     response headers arrive. net/http reads the body once more after
//     Content-Length bytes; when the server answered first, io.Copy reports
//     that io.EOF as a write failure and the transport closes the connection
//     under the streaming answer ("use of closed network connection"). Over a
//     network the answer rarely wins that race; against a local endpoint
//     about one call in ten failed. Hiding WriteTo makes io.Copy use Read,
//     whose (0, io.EOF) is a normal end.
func sdkWorkarounds(o *bedrockruntime.Options) {
	if _, ok := o.Protocol.(*restjson1.Protocol); ok {
		o.Protocol = restjson1.New(schemas.AmazonBedrockFrontendService)
	}
	if o.HTTPClient != nil {
		o.HTTPClient = readOnlyBodies{o.HTTPClient}
	}
}

// ReadOnlyBodies wraps any AWS SDK client's HTTP client with the second fix
// of sdkWorkarounds. The gateway installs it once on its AWS config, so the
// DynamoDB and Firehose clients get it too.
func ReadOnlyBodies(c bedrockruntime.HTTPClient) bedrockruntime.HTTPClient { return readOnlyBodies{c} }

// readOnlyBodies hides the WriteTo method of request bodies (see sdkWorkarounds).
type readOnlyBodies struct {
	client bedrockruntime.HTTPClient
}

func (c readOnlyBodies) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = struct{ io.ReadCloser }{req.Body}
	}
	return c.client.Do(req)
}
