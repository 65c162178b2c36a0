package quota

// Input token estimation.
//
// No Go tokenizer reproduces the tokenizers of the models Bedrock serves
// (Anthropic's, Meta's, Amazon's...) offline, and a wrong guess on the low
// side would let a request slip past a limit before the real usage is known.
// So the estimate is a deliberately conservative bound computed from bytes:
// typical English runs about 4 bytes per token and source code about 3 to
// 3.5, so ceil(bytes/3) over-counts both; a fixed overhead per message
// covers role markers and turn separators. Text in scripts that take more
// than 3 UTF-8 bytes per token (rare) or adversarial input can exceed it;
// settlement charges the real usage reported by Bedrock either way, so an
// estimate only decides admission, never the final charge.
const (
	// EstimateBytesPerToken is the divisor of the byte count.
	EstimateBytesPerToken = 3
	// EstimateMessageOverhead is added per message (and for a non-empty
	// system prompt).
	EstimateMessageOverhead = 8
)

// EstimateInputTokens returns a conservative upper bound of the input
// tokens of a request with the given system prompt and message texts.
func EstimateInputTokens(system string, messages []string) int64 {
	var n int64
	if system != "" {
		n += EstimateTextTokens(system)
	}
	for _, m := range messages {
		n += EstimateTextTokens(m)
	}
	return n
}

// EstimateTextTokens is the input-token estimate of one text (a system
// prompt or a message): the unit EstimateInputTokens sums, and what the
// router places prompt cache points by.
func EstimateTextTokens(s string) int64 {
	return (int64(len(s))+EstimateBytesPerToken-1)/EstimateBytesPerToken + EstimateMessageOverhead
}

// EstimateOutputTokens bounds the tokens of what a model streamed (bytes
// of text, reasoning and tool input) before its stream broke without
// reporting usage: the same bytes-based bound, without the per-message
// overhead.
func EstimateOutputTokens(bytes int) int64 {
	return (int64(bytes) + EstimateBytesPerToken - 1) / EstimateBytesPerToken
}

// Attachments are estimated without decoding them. An image counts
// EstimateImageTokens whatever its size: the models Bedrock serves scale
// large images down before counting (Anthropic's Claude documents about
// 1,600 tokens at most per image), so a fixed bound above that holds for
// any image up to Bedrock's 3.75 MB. A document counts like text, one token
// per EstimateBytesPerToken bytes of the file plus the message overhead: a
// document's extracted text is not larger than its file in the formats
// Bedrock takes, and a PDF's page images stay below it at Bedrock's 4.5 MB.
const EstimateImageTokens = 4000

// EstimateAttachmentTokens returns a conservative upper bound of the input
// tokens of images and of documents of documentBytes bytes in all.
func EstimateAttachmentTokens(images, documents int, documentBytes int64) int64 {
	return int64(images)*EstimateImageTokens + (documentBytes+EstimateBytesPerToken-1)/EstimateBytesPerToken +
		int64(documents)*EstimateMessageOverhead
}
