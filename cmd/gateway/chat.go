package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetway-gateway/jetway/client"
	"github.com/jetway-gateway/jetway/internal/protocol"
)

// defaultChatURL is where `gateway chat` connects: the dev gateway's default listener.
const defaultChatURL = "ws://127.0.0.1:8080/v1/ws"

// defaultChatConnectWait is how long chat waits for a gateway that refuses
// connections (started a moment ago, still compiling or binding) by default.
const defaultChatConnectWait = 30 * time.Second

// maxChatToolRounds bounds the tool calls one prompt may lead to, as the
// demo page bounds them: past it the turn ends with an error.
const maxChatToolRounds = 4

// chatAnswerTimeout bounds one answer, resumes included (the gateway's own
// request timeout is shorter; this only keeps a lost gateway from hanging
// the terminal forever).
const chatAnswerTimeout = 10 * time.Minute

// demoTool is a tool `gateway chat --tools` can run itself.
type demoTool struct {
	tool client.Tool
	run  func(input json.RawMessage) string
}

// demoTools are the tools named by --tools that chat runs on the model's
// behalf; mock-tools (dev mode) calls the first tool it is given.
var demoTools = map[string]demoTool{
	"clock": {
		tool: client.Tool{Name: "clock", Description: "The current date and time",
			InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		run: func(json.RawMessage) string { return time.Now().Format(time.RFC1123) },
	},
}

// chat is `gateway chat [flags] [prompt]`: a terminal client of the
// WebSocket endpoint. It streams each answer as it arrives, keeps the
// conversation's history, runs the demo tools the model calls, and (through
// the client package) reconnects and resumes after a dropped connection.
// Without a prompt it reads one prompt per line from stdin. Without --token
// it mints dev tokens as `gateway token` does. With --me it prints the
// user's standing (chatMe) instead.
func chat(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway chat", flag.ContinueOnError)
	url := fs.String("url", defaultChatURL, "the gateway's WebSocket endpoint")
	token := fs.String("token", "", "bearer token (default: mint dev tokens for --sub, --tenant and --app, as gateway token does)")
	model := fs.String("model", "", "model id (default: the app's default model)")
	system := fs.String("system", "", "system prompt")
	reasoning := fs.Int("reasoning", 0, "reasoning budget in tokens for a reasoning model (0: none; the protocol's minimum is 1024)")
	tools := fs.String("tools", "", "tools to offer: a demo tool chat runs itself ("+strings.Join(demoToolNames(), ", ")+
		"), or a JSON file holding an array of {name, description, input_schema} (their calls are answered with an error result)")
	wait := fs.Duration("wait", defaultChatConnectWait, "how long to wait for a gateway that is not listening yet (just started)")
	me := fs.Bool("me", false, "print the user's standing instead of chatting (GET /v1/me at --url's gateway: each limit, "+
		"what is used and left, when it resets) and exit")
	var u devUser
	u.flags(fs, getenv, false)
	u.CreateKey = true // chat may start before the gateway, which then loads the key chat made
	// Flags may come after the prompt's words too: `gateway chat Hello --model mock-tools`.
	var words []string
	for {
		if err := parseFlags(fs, args, stdout); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		words, args = append(words, fs.Arg(0)), fs.Args()[1:]
	}
	offered, err := loadChatTools(*tools)
	if err != nil {
		return err
	}
	tokenFn := func(context.Context) (string, error) { return *token, nil }
	if *token == "" {
		if _, err := u.mint(getenv); err != nil { // say what is wrong before connecting
			return fmt.Errorf("chat: a dev token (give --token otherwise): %w", err)
		}
		tokenFn = func(context.Context) (string, error) { return u.mint(getenv) }
	}
	if *me {
		if len(words) > 0 {
			return fmt.Errorf("chat --me takes no prompt (got %q)", strings.Join(words, " "))
		}
		return chatMe(ctx, *url, tokenFn, *wait, stdout, stderr)
	}
	s := &chatSession{out: stdout, model: *model, system: *system, tools: offered}
	if *reasoning > 0 {
		s.reasoning = &client.Reasoning{BudgetTokens: *reasoning}
	}
	var lost atomic.Bool
	c, err := dialGateway(ctx, *wait, stderr, client.Options{URLs: []string{*url}, Token: tokenFn, Reconnect: true,
		OnState: func(state string, err error) {
			switch state {
			case "connected":
				if lost.Swap(false) {
					fmt.Fprintln(stderr, "[connected again: resuming]")
				}
			case "disconnected":
				lost.Store(true)
				fmt.Fprintf(stderr, "\n[connection lost (%v): reconnecting]\n", err)
			default:
				fmt.Fprintf(stderr, "\n[%s]\n", state)
			}
		}})
	if err != nil {
		return fmt.Errorf("chat: connect %s: %w%s", *url, err, connectHint(*url, err))
	}
	defer c.Close()
	s.client = c
	if len(words) > 0 {
		return s.ask(ctx, strings.Join(words, " "))
	}
	r := c.Ready()
	interactive := isTerminal(stdin)
	if interactive {
		fmt.Fprintf(stderr, "connected as %s (%s/%s); one prompt per line, Ctrl-D to end\n", r.User, r.Tenant, r.App)
	}
	lines := bufio.NewScanner(stdin)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	turns := 0
	for {
		if interactive {
			fmt.Fprint(stderr, "> ")
		}
		if !lines.Scan() {
			return lines.Err()
		}
		prompt := strings.TrimSpace(lines.Text())
		if prompt == "" {
			continue
		}
		// Turns are told apart: a blank line between answers, and, when
		// the prompts come from a pipe rather than the user's typing, each
		// prompt before its answer.
		if turns > 0 {
			fmt.Fprintln(stdout)
		}
		if !interactive {
			fmt.Fprintf(stdout, "> %s\n", prompt)
		}
		turns++
		if err := s.ask(ctx, prompt); err != nil {
			if ctx.Err() != nil {
				return err
			}
			fmt.Fprintf(stderr, "gateway: %v\n", err) // the conversation goes on without that turn
		}
	}
}

// dialGateway connects, waiting up to wait while the gateway refuses
// connections: the README starts it in the background and chats at once.
func dialGateway(ctx context.Context, wait time.Duration, stderr io.Writer, o client.Options) (*client.Client, error) {
	deadline := time.Now().Add(wait)
	said := false
	for {
		c, err := client.Dial(ctx, o)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return c, err
		}
		if !said {
			fmt.Fprintf(stderr, "[waiting up to %s for the gateway at %s]\n", wait, o.URLs[0])
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(chatConnectRetry):
		}
	}
}

// connectHint is what chat adds to a failed connection: why the URL is
// wrong, or a guess only when no gateway answered (a refusal such as a 401
// came from a running gateway).
func connectHint(url string, err error) string {
	var refused *client.HTTPError
	switch {
	case errors.As(err, &refused):
		return ""
	case !strings.HasPrefix(url, "ws://") && !strings.HasPrefix(url, "wss://"):
		return " (--url takes the WebSocket endpoint, such as " + defaultChatURL + ")"
	}
	return " (is the gateway running?)"
}

// chatConnectRetry is the pause between connection attempts while waiting.
const chatConnectRetry = 250 * time.Millisecond

// chatSession is one conversation: its history and how to print answers.
type chatSession struct {
	client    *client.Client
	out       io.Writer
	model     string
	system    string
	tools     []client.Tool
	reasoning *client.Reasoning
	history   []client.Message

	// What the answer printed so far ended with: the block and its kind.
	started bool
	block   int
	kind    string
}

// ask sends prompt with the history, prints the answer as it streams, runs
// the demo tools it calls and sends their results, and keeps the turns.
// A turn that fails leaves the history as it was.
func (s *chatSession) ask(ctx context.Context, prompt string) error {
	before := len(s.history)
	s.history = append(s.history, client.Message{Role: "user", Content: prompt})
	for round := 0; ; round++ {
		done, err := s.answer(ctx)
		if err != nil {
			s.history = s.history[:before]
			return err
		}
		s.history = append(s.history, done.Turn())
		calls := done.ToolCalls()
		if len(calls) == 0 {
			return nil
		}
		if round == maxChatToolRounds {
			s.history = s.history[:before]
			return fmt.Errorf("chat: stopped after %d tool rounds", maxChatToolRounds)
		}
		results := make([]client.Block, 0, len(calls))
		for _, call := range calls {
			result := s.runTool(call)
			fmt.Fprintf(s.out, "[%s -> %s]\n", call.Name, result.Content[0].Text)
			results = append(results, result)
		}
		s.history = append(s.history, client.Message{Role: "user", Blocks: results})
	}
}

// answer sends the conversation and prints the answer as it streams.
func (s *chatSession) answer(ctx context.Context) (*client.Done, error) {
	s.started = false
	call, err := s.client.Send(ctx, client.Request{Messages: s.history, Model: s.model, System: s.system,
		Tools: s.tools, Reasoning: s.reasoning, OnChunkFrame: s.print})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, chatAnswerTimeout)
	defer cancel()
	done, err := call.Wait(wctx)
	if ctx.Err() != nil {
		_ = s.client.Cancel(call.ID) // Ctrl-C: stop the model too
	}
	fmt.Fprintln(s.out)
	return done, err
}

// print writes a chunk as it arrives: text as is, reasoning and tool calls
// on lines of their own.
func (s *chatSession) print(ch client.Chunk) {
	if !s.started || ch.Block != s.block || ch.Kind != s.kind {
		if s.started {
			fmt.Fprintln(s.out)
		}
		s.started, s.block, s.kind = true, ch.Block, ch.Kind
		switch ch.Kind {
		case protocol.KindReasoning:
			fmt.Fprint(s.out, "(thinking) ")
		case protocol.KindToolUse:
			fmt.Fprintf(s.out, "(calls %s) ", ch.Name)
		}
	}
	switch ch.Kind {
	case protocol.KindReasoning:
		fmt.Fprint(s.out, ch.Reasoning)
	case protocol.KindToolUse:
		fmt.Fprint(s.out, ch.Input)
	default:
		fmt.Fprint(s.out, ch.Text)
	}
}

// runTool answers a tool call: a demo tool runs here; any other is an error result.
func (s *chatSession) runTool(call client.Block) client.Block {
	result := client.Block{Type: protocol.BlockToolResult, ToolUseID: call.ID}
	text := fmt.Sprintf("gateway chat cannot run %s: it runs only the demo tools (%s)", call.Name, strings.Join(demoToolNames(), ", "))
	if t, ok := demoTools[call.Name]; ok {
		text = t.run(call.Input)
	} else {
		result.Status = "error"
	}
	result.Content = []client.Block{{Type: protocol.BlockText, Text: text}}
	return result
}

// loadChatTools reads --tools: demo tool names separated by commas, or a JSON file.
func loadChatTools(spec string) ([]client.Tool, error) {
	if spec == "" {
		return nil, nil
	}
	var tools []client.Tool
	if _, err := os.Stat(spec); err == nil || strings.HasSuffix(spec, ".json") {
		b, err := os.ReadFile(spec)
		if err != nil {
			return nil, fmt.Errorf("--tools: %w", err)
		}
		if err := json.Unmarshal(b, &tools); err != nil {
			return nil, fmt.Errorf("--tools %s: want a JSON array of {name, description, input_schema}: %w", spec, err)
		}
		if len(tools) == 0 {
			return nil, fmt.Errorf("--tools %s: no tools in it", spec)
		}
		return tools, nil
	}
	for _, name := range strings.Split(spec, ",") {
		t, ok := demoTools[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("--tools %q: no demo tool %q and no such file (demo tools: %s)", spec, name, strings.Join(demoToolNames(), ", "))
		}
		tools = append(tools, t.tool)
	}
	return tools, nil
}

func demoToolNames() []string {
	names := make([]string, 0, len(demoTools))
	for n := range demoTools {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// isTerminal reports whether r is a terminal (then chat prompts for input).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
