package mockmodel

import (
	"regexp"
	"sync"
)

// modelMarkdown answers every prompt with markdownAnswer, so that a chat
// page can show what it makes of Markdown (see the package comment).
const modelMarkdown = "mock-markdown"

// markdownAnswer is mock-markdown's answer: a heading, emphasis, a list, a
// table, a fenced code block and a link.
const markdownAnswer = "## Gate B12 at a glance\n\n" +
	"Boarding for **your flight** starts *40 minutes* before departure. Before you go:\n\n" +
	"- Keep your boarding pass ready, on your phone or printed\n" +
	"- Gate B12 is in Terminal 2, about a 6-minute walk from security\n" +
	"- Liquids over 100 ml go in checked baggage\n\n" +
	"| Step | Where | Allow |\n" +
	"|---|---|---|\n" +
	"| Security | Hall B | 10 min |\n" +
	"| Passport control | Pier B | 5 min |\n" +
	"| Boarding | Gate B12 | 20 min |\n\n" +
	"To ask the gateway from code:\n\n" +
	"```js\n" +
	"const call = client.send({ messages: [{ role: 'user', content: 'Where is gate B12?' }] });\n" +
	"for await (const chunk of call) output.append(chunk.text);\n" +
	"```\n\n" +
	"More in the [Jetway protocol guide](https://github.com/jetway-gateway/jetway/blob/main/docs/protocol.md)."

// markdownPieces is markdownAnswer cut into the pieces it streams as: each
// is the whitespace before a word and the word (the first has none), so
// that they join to the answer exactly.
var markdownPieces = sync.OnceValue(func() []string {
	return regexp.MustCompile(`\s*\S+`).FindAllString(markdownAnswer, -1)
})
