package telemetry

import (
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logTimeLayout is RFC 3339 with milliseconds, always in UTC.
const logTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// NewLogger returns a JSON logger writing to w at the given level ("debug",
// "info", "warn", "error"; "" means "info"). Lines carry "ts" (RFC 3339 with
// milliseconds, UTC), "level", "msg", "caller", and the fields. Sampling is
// off: every request line matters. Stack traces are attached only at DPanic
// and above, so expected request errors stay one line. Writes to w are
// serialised, so w need not be safe for concurrent use.
func NewLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl := zapcore.InfoLevel
	if s := strings.TrimSpace(level); s != "" {
		parsed, err := zapcore.ParseLevel(strings.ToLower(s))
		if err != nil {
			return nil, fmt.Errorf("telemetry: invalid log level %q (want debug, info, warn or error)", level)
		}
		lvl = parsed
	}
	enc := zapcore.EncoderConfig{
		TimeKey:        "ts",
		LevelKey:       "level",
		NameKey:        "logger",
		CallerKey:      "caller",
		MessageKey:     "msg",
		StacktraceKey:  "stacktrace",
		LineEnding:     zapcore.DefaultLineEnding,
		EncodeLevel:    zapcore.LowercaseLevelEncoder,
		EncodeTime:     encodeTime,
		EncodeDuration: zapcore.MillisDurationEncoder,
		EncodeCaller:   zapcore.ShortCallerEncoder,
	}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel)), nil
}

func encodeTime(t time.Time, e zapcore.PrimitiveArrayEncoder) {
	e.AppendString(t.UTC().Format(logTimeLayout))
}

// UnauthenticatedLinesPerSecond bounds the log lines of refusals before a
// user is known (a bad or missing token, a refused origin): at most this
// many lines of each message a second per door, whoever sends them; the
// rest are dropped from the log (each refusal is still counted in
// jetway_unauthenticated_refusals_total or connections_rejected_total).
// Anyone can send bad tokens, so their log volume must not be theirs to choose.
const UnauthenticatedLinesPerSecond = 10

// UnauthenticatedLogger is logger sampled for the lines of unauthenticated
// refusals: UnauthenticatedLinesPerSecond lines of each message each
// second, the rest dropped (zap's sampler: fixed memory, never blocks).
func UnauthenticatedLogger(logger *zap.Logger) *zap.Logger {
	return logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, UnauthenticatedLinesPerSecond, 0)
	}))
}
