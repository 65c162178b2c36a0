package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/smithy-go"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"
	"github.com/google/uuid"
)

// direct is a client's ConverseStream call prepared once: what the SDK's
// middleware stack works out again on every call (the options' copy, the
// stack of some thirty middlewares, the endpoint, the auth scheme, the
// retry loop of one attempt, the event-stream reader and its goroutine)
// is resolved when the client is made, and a call is the SDK's own
// serializer (the same body and path), a SigV4 signature by the client's
// signer and credentials, one request on its HTTP client, and, for an
// error answer, the SDK's own error deserializer wrapped as the SDK wraps
// it (*smithy.OperationError over *awshttp.ResponseError), so that
// classify sees what it saw.
//
// It is made only for a client whose calls the stack would not change:
// one attempt (JETWAY_BEDROCK_MAX_ATTEMPTS above 1, or the adaptive retry
// mode's client-side rate limit, keep the SDK's retry loop), SigV4 with
// credentials (not a bearer token or anonymous), no API options,
// interceptors or wire logging, and an endpoint with no headers or
// signing overrides of its own. Any other client calls through the SDK.
//
// What it leaves out of the stack: the SDK's tracing spans and metrics
// (no-op providers here), the per-call user agent features, and the
// correction of the signing time by a clock skew the SDK learns from
// earlier answers (a clock more than 5 minutes off fails every call with
// InvalidSignatureException, where the SDK would fail one and correct the
// next: the task's clock is kept by the platform's time sync).
type direct struct {
	client  bedrockruntime.HTTPClient
	signer  bedrockruntime.HTTPSignerV4
	creds   aws.CredentialsProvider
	retryer aws.Retryer
	region  string // the signing region
	scheme  string
	host    string
	path    string // the endpoint's base path, usually ""
	rawPath string
}

// converseStreamOp is the operation's schema, for the SDK's serializer
// and error deserializer.
var converseStreamOp = smithy.NewOperationSchema(schemas.ConverseStream, schemas.ConverseStreamRequest, schemas.ConverseStreamResponse)

// signingName is Bedrock's SigV4 service name.
const signingName = "bedrock"

// newDirect prepares the calls of a client made with options o, or
// returns nil when they must go through the SDK's stack.
func newDirect(o bedrockruntime.Options) *direct {
	if o.Retryer == nil || o.Retryer.MaxAttempts() != 1 || o.RetryMode == aws.RetryModeAdaptive ||
		len(o.APIOptions) > 0 || len(o.Interceptors.BeforeExecution)+len(o.Interceptors.BeforeSerialization)+
		len(o.Interceptors.AfterSerialization)+len(o.Interceptors.BeforeRetryLoop)+len(o.Interceptors.BeforeAttempt)+
		len(o.Interceptors.BeforeSigning)+len(o.Interceptors.AfterSigning)+len(o.Interceptors.BeforeTransmit)+
		len(o.Interceptors.AfterTransmit)+len(o.Interceptors.BeforeDeserialization)+
		len(o.Interceptors.AfterDeserialization)+len(o.Interceptors.AfterAttempt)+len(o.Interceptors.AfterExecution) > 0 ||
		o.ClientLogMode != 0 || o.BearerAuthTokenProvider != nil || len(o.AuthSchemePreference) > 0 ||
		o.Credentials == nil || o.HTTPSignerV4 == nil || o.HTTPClient == nil || o.EndpointResolverV2 == nil ||
		o.Region == "" || o.EndpointOptions.DisableHTTPS {
		return nil
	}
	if _, anonymous := o.Credentials.(aws.AnonymousCredentials); anonymous {
		return nil
	}
	if _, ok := o.Protocol.(*restjson1.Protocol); !ok {
		return nil
	}
	ep, err := o.EndpointResolverV2.ResolveEndpoint(context.Background(), bedrockruntime.EndpointParameters{
		Region:       aws.String(o.Region),
		UseDualStack: aws.Bool(o.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		UseFIPS:      aws.Bool(o.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		Endpoint:     o.BaseEndpoint,
	})
	if err != nil || len(ep.Headers) > 0 || ep.URI.Host == "" {
		return nil
	}
	if opts, ok := smithyauth.GetAuthOptions(&ep.Properties); ok && len(opts) > 0 {
		// The endpoint names signing properties of its own (another
		// region or name): the SDK's stack applies them.
		return nil
	}
	return &direct{client: o.HTTPClient, signer: o.HTTPSignerV4, creds: o.Credentials, retryer: o.Retryer,
		region: o.Region, scheme: ep.URI.Scheme, host: ep.URI.Host, path: ep.URI.Path, rawPath: ep.URI.RawPath}
}

// call sends one ConverseStream request and returns the body of its
// successful answer, or the error the SDK would have returned (its
// retry loop, at one attempt, wraps a retryable error in
// *retry.MaxAttemptsError; so does call).
func (d *direct) call(ctx context.Context, in *bedrockruntime.ConverseStreamInput) (io.ReadCloser, error) {
	body, req, err := d.request(ctx, in)
	if err != nil {
		return nil, d.opError(err)
	}
	sum := sha256.Sum256(body)
	creds, err := d.creds.Retrieve(ctx)
	if err != nil {
		return nil, d.opError(fmt.Errorf("failed to retrieve credentials: %w", err))
	}
	if err := d.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), signingName, d.region, time.Now().UTC()); err != nil {
		return nil, d.opError(fmt.Errorf("failed to sign request: %w", err))
	}
	resp, err := d.client.Do(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	if resp == nil {
		resp = &http.Response{Header: http.Header{}, Body: http.NoBody}
	}
	sresp := &smithyhttp.Response{Response: resp}
	if err != nil {
		err = &smithyhttp.RequestSendError{Err: err}
		if ctx.Err() != nil {
			err = &smithy.CanceledError{Err: ctx.Err()}
		}
	} else {
		defer resp.Body.Close()
		err = converseProtocol.DeserializeResponse(ctx, converseStreamOp, bedrockruntime.TypeRegistry, sresp, &bedrockruntime.ConverseStreamOutput{})
		if err == nil {
			err = fmt.Errorf("bedrock answered HTTP %d without an event stream", resp.StatusCode)
		}
	}
	id := resp.Header.Get("X-Amzn-Requestid")
	if id == "" {
		id = resp.Header.Get("X-Amz-Request-Id")
	}
	return nil, d.opError(&awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: sresp, Err: err}, RequestID: id})
}

// userAgent is the SDK's own, less the per-call features.
var userAgent = "aws-sdk-go-v2/" + aws.SDKVersion + " ua/2.1 os/" + runtime.GOOS + " lang/go#" + runtime.Version() +
	" md/GOOS#" + runtime.GOOS + " md/GOARCH#" + runtime.GOARCH + " api/bedrockruntime"

// opError wraps err as the SDK's stack does at one attempt.
func (d *direct) opError(err error) error {
	if d.retryer.IsErrorRetryable(err) {
		err = &retry.MaxAttemptsError{Attempt: 1, Err: err}
	}
	return &smithy.OperationError{ServiceID: bedrockruntime.ServiceID, OperationName: "ConverseStream", Err: err}
}

// converseProtocol serializes requests and reads error answers: neither
// touches the protocol's event-stream codec, the one state its calls
// would share (see sdkWorkarounds).
var converseProtocol = restjson1.New(schemas.AmazonBedrockFrontendService)

// request is the call's HTTP request and its body, as the SDK's stack
// builds it: the SDK's serializer (path, headers, JSON body) joined to
// the endpoint.
func (d *direct) request(ctx context.Context, in *bedrockruntime.ConverseStreamInput) ([]byte, *http.Request, error) {
	sreq := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	if err := converseProtocol.SerializeRequest(ctx, converseStreamOp, in, sreq); err != nil {
		return nil, nil, &smithy.SerializationError{Err: err}
	}
	var body []byte
	if s := sreq.GetStream(); s != nil {
		r, ok := s.(*bytes.Reader)
		if !ok {
			return nil, nil, &smithy.SerializationError{Err: fmt.Errorf("unexpected request body %T", s)}
		}
		body = make([]byte, r.Len())
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, nil, &smithy.SerializationError{Err: err}
		}
	}
	req := sreq.Request.WithContext(ctx)
	u := *req.URL
	u.Scheme, u.Host = d.scheme, d.host
	base := d.rawPath
	if base == "" && u.RawPath != "" {
		base = d.path
	}
	u.Path, u.RawPath = smithyhttp.JoinPath(d.path, u.Path), smithyhttp.JoinPath(base, u.RawPath)
	req.URL, req.Host = &u, ""
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Amz-Sdk-Invocation-Id", uuid.NewString())
	req.Header.Set("Amz-Sdk-Request", "attempt=1; max=1")
	req.ContentLength = int64(len(body))
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	} else {
		req.Body, req.GetBody = http.NoBody, nil
	}
	return body, req, nil
}
