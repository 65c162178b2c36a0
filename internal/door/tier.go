package door

import (
	"fmt"

	"github.com/jetway-gateway/jetway/internal/call"
)

// openAITiers are OpenAI's service_tier values Jetway serves, as the
// core's tiers: "auto" is the app's tier ("").
var openAITiers = map[string]string{"auto": "", "default": call.TierDefault, "flex": call.TierFlex,
	"priority": call.TierPriority}

// OpenAIServiceTier reads OpenAI's service_tier (Chat Completions and the
// Responses API define it alike) as the core's tier. A value it does not
// serve returns the OpenAI error code and message of its refusal:
// unsupported_parameter for "scale", which Bedrock has no tier for, else
// invalid_request; code is "" for a value served.
func OpenAIServiceTier(v string) (tier, code, msg string) {
	if tier, ok := openAITiers[v]; ok {
		return tier, "", ""
	}
	if v == "scale" {
		return "", "unsupported_parameter",
			`service_tier "scale" is not supported by this gateway: Bedrock has no scale tier; send "auto", "default", "flex" or "priority"`
	}
	return "", "invalid_request", fmt.Sprintf(`service_tier must be "auto", "default", "flex" or "priority", got %q`, call.Clip(v))
}
