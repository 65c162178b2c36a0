package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// The attributes of Jetway's spans: the OpenTelemetry GenAI semantic
// conventions where they say something (docs/operations.md, "Tracing"),
// jetway.* for the rest. Every value comes from configuration or from
// the gateway itself (ids it validated, codes from its one error table),
// never a prompt or an answer.
var (
	// GenAIChat and GenAIBedrock open every span of a request and of a
	// model attempt; gen_ai.system is the older name of gen_ai.provider.name,
	// which X-Ray and older UIs still read.
	GenAIChat    = semconv.GenAIOperationNameChat
	GenAIBedrock = semconv.GenAIProviderNameAWSBedrock
	GenAISystem  = attribute.String("gen_ai.system", "aws.bedrock")
)

// Attribute keys.
const (
	RequestModel   = semconv.GenAIRequestModelKey
	ResponseModel  = semconv.GenAIResponseModelKey
	MaxTokens      = semconv.GenAIRequestMaxTokensKey
	InputTokens    = semconv.GenAIUsageInputTokensKey
	OutputTokens   = semconv.GenAIUsageOutputTokensKey
	FinishReasons  = semconv.GenAIResponseFinishReasonsKey
	ErrorType      = semconv.ErrorTypeKey
	Tenant         = attribute.Key("jetway.tenant")
	App            = attribute.Key("jetway.app")
	RequestID      = attribute.Key("jetway.request_id")
	Door           = attribute.Key("jetway.door")
	Outcome        = attribute.Key("jetway.outcome") // done, or the error code of the terminal
	Model          = attribute.Key("jetway.model")   // the configured model id (gen_ai.request.model is Bedrock's)
	Server         = attribute.Key("jetway.server")  // the instance that owns a record
	AuthResult     = attribute.Key("jetway.auth.result")
	QuotaOutcome   = attribute.Key("jetway.quota.outcome") // reserved, exceeded, error
	QuotaLease     = attribute.Key("jetway.quota.lease")   // admitted from this server's lease
	QuotaWindow    = attribute.Key("jetway.quota.window")
	CacheHit       = attribute.Key("jetway.cache.hit")
	RecordOutcome  = attribute.Key("jetway.record.outcome") // created, follows, conflict, error
	Attempt        = attribute.Key("jetway.attempt")        // 0 for a model's first call, n for its nth retry
	RetryReason    = attribute.Key("jetway.retry.reason")   // the error kind of the call retried
	FallbackFrom   = attribute.Key("jetway.fallback.from")  // the model that failed before this one
	FallbackReason = attribute.Key("jetway.fallback.reason")
	Placement      = attribute.Key("jetway.placement")       // the model's placement called (region, or region/account)
	PlacementFrom  = attribute.Key("jetway.placement.from")  // the placement that failed before this one (same model)
	BedrockProfile = attribute.Key("jetway.bedrock_profile") // the application inference profile ARN called
	ServiceTier    = attribute.Key("jetway.service_tier")    // the serviceTier the call named
	Chunks         = attribute.Key("jetway.chunks")
	Cached         = attribute.Key("jetway.cached")
)
