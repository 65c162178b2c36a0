package quota_test

import (
	"strings"
	"testing"

	"github.com/jetway-gateway/jetway/internal/quota"
)

func TestEstimateInputTokens(t *testing.T) {
	tests := []struct {
		system   string
		messages []string
		want     int64
	}{
		{"", nil, 0},
		{"", []string{""}, 8},          // an empty message still has its markers
		{"", []string{"hello"}, 2 + 8}, // ceil(5/3)
		{"", []string{"abc"}, 1 + 8},   // exactly 3 bytes
		{"be brief", []string{"hi", "hey"}, 3 + 8 + 1 + 8 + 1 + 8}, // system counts like a message
		{"", []string{"héllo"}, 2 + 8},                             // bytes, not runes: é is 2 bytes (6 bytes)
	}
	for _, tt := range tests {
		if got := quota.EstimateInputTokens(tt.system, tt.messages); got != tt.want {
			t.Errorf("EstimateInputTokens(%q, %q) = %d, want %d", tt.system, tt.messages, got, tt.want)
		}
	}
}

// The estimate stays above real tokenizer counts for English: about 4 bytes
// per token, here with generous slack (one token per 3.5 bytes would still
// be covered).
func TestEstimateIsConservativeForEnglish(t *testing.T) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog while the gateway counts tokens. ", 40)
	got := quota.EstimateInputTokens("", []string{text})
	if lower := int64(float64(len(text)) / 3.5); got < lower {
		t.Errorf("estimate %d < %d for %d bytes", got, lower, len(text))
	}
}

func TestEstimateAttachments(t *testing.T) {
	if got := quota.EstimateAttachmentTokens(0, 0, 0); got != 0 {
		t.Fatalf("nothing attached: %d", got)
	}
	// Two images and one document of 3,000 bytes.
	if got, want := quota.EstimateAttachmentTokens(2, 1, 3000), int64(2*quota.EstimateImageTokens+1000+quota.EstimateMessageOverhead); got != want {
		t.Fatalf("got %d, want %d", got, want)
	}
}
