package terraform

import (
	"fmt"
	"maps"
	"math/big"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// The settings the ECS task must set; each must also be documented.
var requiredSettings = []string{
	"JETWAY_LISTEN", "JETWAY_ADMIN_LISTEN", "JETWAY_CONFIG", "JETWAY_AUTH_ISSUER", "JETWAY_ALLOWED_ORIGINS",
	"JETWAY_DRAIN_TIMEOUT", "JETWAY_LOG_LEVEL", "JETWAY_QUOTA_TABLE", "JETWAY_REQUESTS_TABLE", "JETWAY_CACHE_TABLE",
	"JETWAY_FIREHOSE_STREAM", "JETWAY_EMF", "JETWAY_MAX_INFLIGHT", "AWS_REGION",
	"JETWAY_HEALTH_CHECK_INTERVAL", "JETWAY_SELF_DRAIN_MISSES", "JETWAY_HEALTH_CHECK_USER_AGENT", "JETWAY_MEMBERS_TABLE",
	"JETWAY_CONFIG_TABLE", "JETWAY_ALERT_SNS_TOPIC_ARN",
}

// The gateway's EMF metrics (internal/telemetry, namespace Jetway).
var emfMetrics = []string{"ActiveSessions", "InFlight", "Requests", "Errors", "QuotaRejections", "TTFT", "Latency",
	"Takeovers", "SessionsMoved", "InputTokens", "CacheReadTokens", "CacheWriteTokens", "CacheSavedMicroUSD", "UsageRecordsDropped"}

// configurationDoc is docs/configuration.md, the server's own statement of
// its settings and their defaults.
type configurationDoc string

func readConfigurationDoc(t *testing.T) configurationDoc {
	t.Helper()
	return configurationDoc(readRepoFile(t, "docs/configuration.md"))
}

// row returns the table row documenting setting name.
func (d configurationDoc) row(t *testing.T, name string) string {
	t.Helper()
	for _, line := range strings.Split(string(d), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "| `"+name+"`") {
			return line
		}
	}
	t.Fatalf("docs/configuration.md has no table row for %s", name)
	return ""
}

// defaultOf returns the documented default of setting name (the second cell's code span).
func (d configurationDoc) defaultOf(t *testing.T, name string) string {
	t.Helper()
	row := d.row(t, name)
	cells := strings.Split(row, "|")
	if len(cells) < 4 {
		t.Fatalf("docs/configuration.md: row of %s has no default cell: %s", name, row)
	}
	m := regexp.MustCompile("`([^`]+)`").FindStringSubmatch(cells[2])
	if m == nil {
		t.Fatalf("docs/configuration.md: no default value for %s in %q", name, cells[2])
	}
	return m[1]
}

func (d configurationDoc) duration(t *testing.T, name string) time.Duration {
	t.Helper()
	v, err := time.ParseDuration(d.defaultOf(t, name))
	if err != nil {
		t.Fatalf("docs/configuration.md: default of %s: %v", name, err)
	}
	return v
}

func (d configurationDoc) port(t *testing.T, name string) int64 {
	t.Helper()
	_, p, err := net.SplitHostPort(d.defaultOf(t, name))
	if err != nil {
		t.Fatalf("docs/configuration.md: default of %s: %v", name, err)
	}
	n, err := strconv.ParseInt(p, 10, 64)
	if err != nil {
		t.Fatalf("docs/configuration.md: default of %s: %v", name, err)
	}
	return n
}

// taskEnvironment returns the gateway container's environment as written in
// modules/ecs (local.environment), by name.
func taskEnvironment(t *testing.T, ecs *tfDir) map[string]hclsyntax.Expression {
	t.Helper()
	obj, ok := ecs.local(t, "environment").(*hclsyntax.ObjectConsExpr)
	if !ok {
		t.Fatalf("modules/ecs: local.environment must be an object literal")
	}
	env := map[string]hclsyntax.Expression{}
	for _, it := range obj.Items {
		k, ok := literalKey(it.KeyExpr)
		if !ok {
			t.Fatalf("%s: environment names must be literal", it.KeyExpr.Range())
		}
		env[k] = it.ValueExpr
	}
	return env
}

// gatewayContainer returns the gateway's container definition: the object
// of the task definition's jsonencode list that sets stopTimeout.
func gatewayContainer(t *testing.T, ecs *tfDir) *hclsyntax.ObjectConsExpr {
	t.Helper()
	td := ecs.block(t, "resource", "aws_ecs_task_definition", "this")
	defs := attr(t, "task definition", td.Body, "container_definitions").Expr
	var found []*hclsyntax.ObjectConsExpr
	hclsyntax.VisitAll(defs, func(n hclsyntax.Node) hcl.Diagnostics {
		if obj, ok := n.(*hclsyntax.ObjectConsExpr); ok && item(obj, "stopTimeout") != nil {
			found = append(found, obj)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("modules/ecs: want one container with stopTimeout, found %d", len(found))
	}
	return found[0]
}

// containers returns every container definition of the task definition:
// jsonencode(concat([...], local.collector)), the optional collector
// sidecar being local.collector = cond ? [{...}] : [].
func containers(t *testing.T, ecs *tfDir) []*hclsyntax.ObjectConsExpr {
	t.Helper()
	td := ecs.block(t, "resource", "aws_ecs_task_definition", "this")
	call, ok := attr(t, "task definition", td.Body, "container_definitions").Expr.(*hclsyntax.FunctionCallExpr)
	if !ok || call.Name != "jsonencode" || len(call.Args) != 1 {
		t.Fatalf("modules/ecs: container_definitions must be jsonencode(concat([...], local.collector))")
	}
	cat, ok := call.Args[0].(*hclsyntax.FunctionCallExpr)
	if !ok || cat.Name != "concat" || len(cat.Args) != 2 {
		t.Fatalf("modules/ecs: container_definitions must encode concat([...], local.collector)")
	}
	list, ok := cat.Args[0].(*hclsyntax.TupleConsExpr)
	if !ok {
		t.Fatalf("modules/ecs: container_definitions must encode a list literal")
	}
	exprs := list.Exprs
	if src := ecs.source(cat.Args[1].Range()); src != "local.collector" {
		t.Fatalf("modules/ecs: the optional containers are %s, want local.collector", src)
	}
	cond, ok := ecs.local(t, "collector").(*hclsyntax.ConditionalExpr)
	if !ok {
		t.Fatalf("modules/ecs: local.collector must be cond ? [{...}] : []")
	}
	sidecar, ok := cond.TrueResult.(*hclsyntax.TupleConsExpr)
	if !ok {
		t.Fatalf("modules/ecs: local.collector's containers must be a list literal")
	}
	exprs = append(exprs, sidecar.Exprs...)
	var out []*hclsyntax.ObjectConsExpr
	for _, e := range exprs {
		obj, ok := e.(*hclsyntax.ObjectConsExpr)
		if !ok {
			t.Fatalf("%s: container definition must be an object literal", e.Range())
		}
		out = append(out, obj)
	}
	return out
}

// item returns the value of key in obj, or nil.
func item(obj *hclsyntax.ObjectConsExpr, key string) hclsyntax.Expression {
	for _, it := range obj.Items {
		if k, ok := literalKey(it.KeyExpr); ok && k == key {
			return it.ValueExpr
		}
	}
	return nil
}

func asInt(t *testing.T, what string, v cty.Value) int64 {
	t.Helper()
	if v.Type() == cty.String {
		n, err := strconv.ParseInt(v.AsString(), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q is not a number", what, v.AsString())
		}
		return n
	}
	if v.Type() != cty.Number {
		t.Fatalf("%s: %s is not a number", what, v.Type().FriendlyName())
	}
	n, acc := v.AsBigFloat().Int64()
	if acc != big.Exact {
		t.Fatalf("%s: %s is not an integer", what, v.AsBigFloat())
	}
	return n
}

func asString(t *testing.T, what string, v cty.Value) string {
	t.Helper()
	if v.Type() != cty.String {
		t.Fatalf("%s: %s is not a string", what, v.Type().FriendlyName())
	}
	return v.AsString()
}

func defaultOf(t *testing.T, d *tfDir, name string) cty.Value {
	t.Helper()
	v, ok := d.defaults()[name]
	if !ok || !v.IsKnown() || v.IsNull() {
		t.Fatalf("%s: variable %q has no literal default", d.rel, name)
	}
	return v
}

func checkTaskEnvironmentIsDocumented(t *testing.T, s *stack) {
	doc := readConfigurationDoc(t)
	env := taskEnvironment(t, s.dir(t, "modules/ecs"))
	for _, name := range requiredSettings {
		if env[name] == nil {
			t.Errorf("the task does not set %s", name)
		}
	}
	var names []string
	for name := range env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("the task sets %s, which docs/configuration.md does not document", name)
		}
	}
	// The ECS module sends exactly local.environment, nothing else.
	gw := gatewayContainer(t, s.dir(t, "modules/ecs"))
	src := s.dir(t, "modules/ecs").source(item(gw, "environment").Range())
	if !strings.Contains(src, "local.environment") {
		t.Errorf("the gateway container's environment is %s, want it built from local.environment", src)
	}
	for _, c := range containers(t, s.dir(t, "modules/ecs")) {
		env := item(c, "environment")
		if c == gw || env == nil {
			continue
		}
		// The collector sidecar's only variable is its configuration.
		if src := s.dir(t, "modules/ecs").source(env.Range()); src != `[{ name = "AOT_CONFIG_CONTENT", value = local.collector_config }]` {
			t.Errorf("%s: only the gateway container may have an environment (the collector: its configuration alone), got %s", c.Range(), src)
		}
	}
}

// checkPortsAndHealthCheckMatchServer: the ports and health check path the
// load balancer and task use are the ones the server listens on.
func checkPortsAndHealthCheckMatchServer(t *testing.T, s *stack) {
	doc := readConfigurationDoc(t)
	appPort := doc.port(t, "JETWAY_LISTEN")
	adminPort := doc.port(t, "JETWAY_ADMIN_LISTEN")
	if appPort != 8080 || adminPort != 9090 {
		t.Errorf("documented ports %d/%d, want 8080/9090", appPort, adminPort)
	}
	if !strings.Contains(doc.row(t, "JETWAY_LISTEN"), "/v1/ws") {
		t.Errorf("docs/configuration.md: JETWAY_LISTEN no longer serves /v1/ws")
	}
	if !strings.Contains(doc.row(t, "JETWAY_ADMIN_LISTEN"), "`/readyz`") {
		t.Errorf("docs/configuration.md: JETWAY_ADMIN_LISTEN no longer serves /readyz")
	}

	ecs := s.dir(t, "modules/ecs")
	ctx := ecs.evalContext()
	env := taskEnvironment(t, ecs)
	if got := asString(t, "JETWAY_LISTEN", eval(t, "JETWAY_LISTEN", env["JETWAY_LISTEN"], ctx)); got != fmt.Sprintf("0.0.0.0:%d", appPort) {
		t.Errorf("JETWAY_LISTEN = %q, want 0.0.0.0:%d", got, appPort)
	}
	if got := asString(t, "JETWAY_ADMIN_LISTEN", eval(t, "JETWAY_ADMIN_LISTEN", env["JETWAY_ADMIN_LISTEN"], ctx)); got != fmt.Sprintf("0.0.0.0:%d", adminPort) {
		t.Errorf("JETWAY_ADMIN_LISTEN = %q, want 0.0.0.0:%d", got, adminPort)
	}
	gw := gatewayContainer(t, ecs)
	var ports []int64
	for _, p := range objectItems(item(gw, "portMappings"), "containerPort") {
		ports = append(ports, asInt(t, "containerPort", eval(t, "containerPort", p, ctx)))
	}
	slices.Sort(ports)
	if !slices.Equal(ports, []int64{appPort, adminPort}) {
		t.Errorf("container ports %v, want [%d %d]", ports, appPort, adminPort)
	}
	svc := ecs.block(t, "resource", "aws_ecs_service", "this")
	lb := nested(svc.Body, "load_balancer")
	if len(lb) != 1 {
		t.Fatalf("ECS service: want one load_balancer block, got %d", len(lb))
	}
	if got := asInt(t, "container_port", eval(t, "load_balancer.container_port", attr(t, "load_balancer", lb[0].Body, "container_port").Expr, ctx)); got != appPort {
		t.Errorf("the service registers container port %d, want %d", got, appPort)
	}
	for _, rule := range []string{"app", "admin"} {
		r := ecs.block(t, "resource", "aws_vpc_security_group_ingress_rule", rule)
		from := asInt(t, rule, eval(t, rule+".from_port", attr(t, rule, r.Body, "from_port").Expr, ctx))
		if want := map[string]int64{"app": appPort, "admin": adminPort}[rule]; from != want {
			t.Errorf("task ingress %s opens %d, want %d", rule, from, want)
		}
		if src := ecs.source(attr(t, rule, r.Body, "referenced_security_group_id").Expr.Range()); src != "var.alb_security_group_id" {
			t.Errorf("task ingress %s comes from %s, want the load balancer only", rule, src)
		}
	}

	alb := s.dir(t, "modules/alb")
	actx := alb.evalContext()
	tg := alb.block(t, "resource", "aws_lb_target_group", "app")
	if got := asInt(t, "target group port", eval(t, "target group port", attr(t, "tg", tg.Body, "port").Expr, actx)); got != appPort {
		t.Errorf("target group port %d, want %d", got, appPort)
	}
	hc := nested(tg.Body, "health_check")
	if len(hc) != 1 {
		t.Fatalf("target group: want one health_check, got %d", len(hc))
	}
	if got := asInt(t, "health check port", eval(t, "health check port", attr(t, "health_check", hc[0].Body, "port").Expr, actx)); got != adminPort {
		t.Errorf("health check port %d, want the admin port %d", got, adminPort)
	}
	if got := asString(t, "health check path", eval(t, "health check path", attr(t, "health_check", hc[0].Body, "path").Expr, actx)); got != "/readyz" {
		t.Errorf("health check path %q, want /readyz", got)
	}
	if got := asString(t, "matcher", eval(t, "matcher", attr(t, "health_check", hc[0].Body, "matcher").Expr, actx)); got != "200" {
		t.Errorf("health check matcher %q, want 200", got)
	}

	// Nobody overrides the ports or the health check on the way down; the
	// ECS module gets the target group's interval and delay from the alb module.
	jw := s.dir(t, "modules/jetway")
	for _, call := range []string{"alb", "ecs"} {
		b := jw.block(t, "module", call)
		for _, arg := range []string{"app_port", "admin_port", "health_check_path", "idle_timeout", "deregistration_delay",
			"drain_timeout_seconds", "stop_timeout", "health_check_interval", "self_drain_misses"} {
			a, ok := b.Body.Attributes[arg]
			if !ok {
				continue
			}
			if call == "ecs" && (arg == "health_check_interval" || arg == "deregistration_delay") {
				if src := jw.source(a.Expr.Range()); src != "module.alb."+arg {
					t.Errorf("modules/jetway: module ecs gets %s = %s, want module.alb.%s", arg, src, arg)
				}
				continue
			}
			t.Errorf("modules/jetway: module %q overrides %s; the defaults are the server's values", call, arg)
		}
	}
	for _, arg := range []string{"health_check_interval", "deregistration_delay"} {
		if _, ok := jw.block(t, "module", "ecs").Body.Attributes[arg]; !ok {
			t.Errorf("modules/jetway: module ecs does not get the target group's %s", arg)
		}
	}
}

// checkTimeoutsMatchServer: the ALB idle timeout is above two heartbeats, the
// drain fits in ECS's stopTimeout, and the deregistration delay covers the drain.
func checkTimeoutsMatchServer(t *testing.T, s *stack) {
	doc := readConfigurationDoc(t)
	heartbeat := doc.duration(t, "JETWAY_HEARTBEAT")
	drain := doc.duration(t, "JETWAY_DRAIN_TIMEOUT")
	if heartbeat != 25*time.Second || drain != 110*time.Second {
		t.Logf("documented heartbeat %v, drain %v (the values below follow the document)", heartbeat, drain)
	}

	alb := s.dir(t, "modules/alb")
	idle := time.Duration(asInt(t, "idle_timeout", defaultOf(t, alb, "idle_timeout"))) * time.Second
	if idle <= 2*heartbeat {
		t.Errorf("ALB idle timeout %v must be above two heartbeats (%v)", idle, 2*heartbeat)
	}
	if idle != 120*time.Second {
		t.Errorf("ALB idle timeout %v, want 120s", idle)
	}
	lbBody := alb.block(t, "resource", "aws_lb", "this").Body
	if src := alb.source(attr(t, "aws_lb", lbBody, "idle_timeout").Expr.Range()); src != "var.idle_timeout" {
		t.Errorf("aws_lb.idle_timeout = %s, want var.idle_timeout", src)
	}

	ecs := s.dir(t, "modules/ecs")
	ctx := ecs.evalContext()
	drainVar := time.Duration(asInt(t, "drain_timeout_seconds", defaultOf(t, ecs, "drain_timeout_seconds"))) * time.Second
	if drainVar != drain {
		t.Errorf("ECS drain_timeout_seconds %v, want the server's default %v", drainVar, drain)
	}
	env := taskEnvironment(t, ecs)
	if got := asString(t, "JETWAY_DRAIN_TIMEOUT", eval(t, "JETWAY_DRAIN_TIMEOUT", env["JETWAY_DRAIN_TIMEOUT"], ctx)); got != drain.String() && got != fmt.Sprintf("%ds", int(drain.Seconds())) {
		t.Errorf("JETWAY_DRAIN_TIMEOUT = %q, want %v", got, drain)
	}
	stop := time.Duration(asInt(t, "stopTimeout", eval(t, "stopTimeout", item(gatewayContainer(t, ecs), "stopTimeout"), ctx))) * time.Second
	if stop != 120*time.Second {
		t.Errorf("ECS stopTimeout %v, want 120s (the Fargate maximum)", stop)
	}
	if drain >= stop {
		t.Errorf("drain %v must end before ECS kills the task at stopTimeout %v", drain, stop)
	}
	// Deregistered, the task notices within (misses + 1) intervals, then
	// drains; the load balancer must keep its sockets that long.
	interval := time.Duration(asInt(t, "health_check_interval", defaultOf(t, alb, "health_check_interval"))) * time.Second
	if docInterval := doc.duration(t, "JETWAY_HEALTH_CHECK_INTERVAL"); interval != docInterval {
		t.Errorf("target group health check interval %v, want the server's default %v", interval, docInterval)
	}
	if got := time.Duration(asInt(t, "ecs health_check_interval", defaultOf(t, ecs, "health_check_interval"))) * time.Second; got != interval {
		t.Errorf("modules/ecs health_check_interval default %v, want the target group's %v", got, interval)
	}
	misses, err := strconv.Atoi(doc.defaultOf(t, "JETWAY_SELF_DRAIN_MISSES"))
	if err != nil {
		t.Fatalf("docs/configuration.md: JETWAY_SELF_DRAIN_MISSES: %v", err)
	}
	if got := asInt(t, "self_drain_misses", defaultOf(t, ecs, "self_drain_misses")); got != int64(misses) {
		t.Errorf("modules/ecs self_drain_misses default %d, want the server's %d", got, misses)
	}
	for setting, want := range map[string]string{"JETWAY_HEALTH_CHECK_INTERVAL": fmt.Sprintf("%ds", int(interval.Seconds())), "JETWAY_SELF_DRAIN_MISSES": strconv.Itoa(misses)} {
		if got := asString(t, setting, eval(t, setting, env[setting], ctx)); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	// Only the ALB's own checks arm self-drain: the task is told their
	// User-Agent prefix explicitly, from the alb module, and it is the
	// server's documented default (what every ALB check sends).
	agent := doc.defaultOf(t, "JETWAY_HEALTH_CHECK_USER_AGENT")
	if got := asString(t, "alb local.health_check_user_agent", eval(t, "health_check_user_agent", alb.local(t, "health_check_user_agent"), nil)); got != agent {
		t.Errorf("modules/alb health_check_user_agent %q, want the server's default %q", got, agent)
	}
	if src := ecs.source(env["JETWAY_HEALTH_CHECK_USER_AGENT"].Range()); src != "var.health_check_user_agent" {
		t.Errorf("JETWAY_HEALTH_CHECK_USER_AGENT = %s, want var.health_check_user_agent", src)
	}
	jwECS := s.dir(t, "modules/jetway").block(t, "module", "ecs")
	if src := s.dir(t, "modules/jetway").source(attr(t, "module ecs", jwECS.Body, "health_check_user_agent").Expr.Range()); src != "module.alb.health_check_user_agent" {
		t.Errorf("modules/jetway passes health_check_user_agent = %s, want module.alb.health_check_user_agent", src)
	}
	detection := time.Duration(misses+1) * interval
	dereg := time.Duration(asInt(t, "deregistration_delay", defaultOf(t, alb, "deregistration_delay"))) * time.Second
	if dereg < detection+drain+10*time.Second {
		t.Errorf("deregistration delay %v must cover detection (%v) + drain (%v) + 10s", dereg, detection, drain)
	}
	if got := time.Duration(asInt(t, "ecs deregistration_delay", defaultOf(t, ecs, "deregistration_delay"))) * time.Second; got != dereg {
		t.Errorf("modules/ecs deregistration_delay default %v, want the target group's %v", got, dereg)
	}
	tg := alb.block(t, "resource", "aws_lb_target_group", "app")
	if src := alb.source(attr(t, "target group", tg.Body, "deregistration_delay").Expr.Range()); src != "var.deregistration_delay" {
		t.Errorf("target group deregistration_delay = %s, want var.deregistration_delay", src)
	}
}

// checkTaskHardening: read-only root filesystems, a non-root user, a raised
// nofile limit, EMF on stdout, and a service that rolls back failed deployments.
func checkTaskHardening(t *testing.T, s *stack) {
	ecs := s.dir(t, "modules/ecs")
	ctx := ecs.evalContext()
	for _, c := range containers(t, ecs) {
		ro := item(c, "readonlyRootFilesystem")
		if ro == nil || !eval(t, "readonlyRootFilesystem", ro, ctx).True() {
			t.Errorf("%s: container without readonlyRootFilesystem = true", c.Range())
		}
	}
	gw := gatewayContainer(t, ecs)
	user := asString(t, "user", eval(t, "user", item(gw, "user"), ctx))
	if user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") {
		t.Errorf("the gateway runs as %q, want a non-root uid", user)
	}
	ulimits := item(gw, "ulimits")
	if ulimits == nil {
		t.Fatalf("the gateway container has no ulimits")
	}
	v := eval(t, "ulimits", ulimits, ctx)
	found := false
	for it := v.ElementIterator(); it.Next(); {
		_, u := it.Element()
		if u.GetAttr("name").AsString() != "nofile" {
			continue
		}
		found = true
		soft, hard := asInt(t, "softLimit", u.GetAttr("softLimit")), asInt(t, "hardLimit", u.GetAttr("hardLimit"))
		if soft < 65536 || hard < soft {
			t.Errorf("nofile %d/%d, want at least 65536", soft, hard)
		}
	}
	if !found {
		t.Errorf("no nofile ulimit")
	}
	env := taskEnvironment(t, ecs)
	if got := asString(t, "JETWAY_EMF", eval(t, "JETWAY_EMF", env["JETWAY_EMF"], ctx)); got != "stdout" {
		t.Errorf("JETWAY_EMF = %q, want stdout", got)
	}
	if src := ecs.source(env["JETWAY_AUTH_ISSUER"].Range()); src != "var.auth_issuer" {
		t.Errorf("JETWAY_AUTH_ISSUER = %s, want var.auth_issuer", src)
	}
	jw := s.dir(t, "modules/jetway")
	if src := jw.source(attr(t, "module ecs", jw.block(t, "module", "ecs").Body, "auth_issuer").Expr.Range()); src != "module.cognito.issuer" {
		t.Errorf("modules/jetway passes auth_issuer = %s, want module.cognito.issuer", src)
	}
	cog := s.dir(t, "modules/cognito")
	issuer := cog.named("output")["issuer"]
	if issuer == nil || cog.source(attr(t, "issuer", issuer.Body, "value").Expr.Range()) != `"https://${aws_cognito_user_pool.this.endpoint}"` {
		t.Errorf("modules/cognito: output issuer must be https:// + the pool endpoint (cognito-idp.<region>.amazonaws.com/<pool id>)")
	}

	svc := ecs.block(t, "resource", "aws_ecs_service", "this")
	cb := nested(svc.Body, "deployment_circuit_breaker")
	if len(cb) != 1 {
		t.Fatalf("ECS service without deployment_circuit_breaker")
	}
	for _, a := range []string{"enable", "rollback"} {
		if !eval(t, a, attr(t, "circuit breaker", cb[0].Body, a).Expr, nil).True() {
			t.Errorf("deployment_circuit_breaker.%s must be true", a)
		}
	}
	nc := nested(svc.Body, "network_configuration")
	if len(nc) != 1 || eval(t, "assign_public_ip", attr(t, "network_configuration", nc[0].Body, "assign_public_ip").Expr, nil).True() {
		t.Errorf("tasks must run in private subnets without public IPs")
	}
}

func checkDynamoDBTables(t *testing.T, s *stack) {
	ddb := s.dir(t, "modules/dynamodb")
	ctx := ddb.evalContext()
	tables := stringsOf(t, "local.tables", eval(t, "local.tables", ddb.local(t, "tables"), ctx))
	sort.Strings(tables)
	if !slices.Equal(tables, []string{"cache", "config", "members", "quota", "requests"}) {
		t.Errorf("tables %v, want cache, config, members, quota, requests", tables)
	}
	tb := ddb.block(t, "resource", "aws_dynamodb_table", "this")
	if src := ddb.source(attr(t, "table", tb.Body, "for_each").Expr.Range()); src != "local.tables" {
		t.Errorf("tables for_each = %s, want local.tables", src)
	}
	str := func(name string) string {
		return asString(t, name, eval(t, name, attr(t, "table", tb.Body, name).Expr, ctx))
	}
	if got := str("hash_key"); got != "pk" {
		t.Errorf("hash_key %q, want pk", got)
	}
	if _, ok := tb.Body.Attributes["range_key"]; ok {
		t.Errorf("the tables have no sort key")
	}
	if got := str("billing_mode"); got != "PAY_PER_REQUEST" {
		t.Errorf("billing_mode %q, want on-demand", got)
	}
	attrs := nested(tb.Body, "attribute")
	if len(attrs) != 1 || str2(t, attrs[0].Body, "name", ctx) != "pk" || str2(t, attrs[0].Body, "type", ctx) != "S" {
		t.Errorf("want one static attribute, pk of type S")
	}
	checkTableIndexes(t, ddb, tb.Body)
	ttl := nested(tb.Body, "ttl")
	if len(ttl) != 1 || str2(t, ttl[0].Body, "attribute_name", ctx) != "expires_at" || !eval(t, "ttl.enabled", attr(t, "ttl", ttl[0].Body, "enabled").Expr, ctx).True() {
		t.Errorf("want TTL enabled on expires_at")
	}
	pitr := nested(tb.Body, "point_in_time_recovery")
	if len(pitr) != 1 {
		t.Fatalf("want one point_in_time_recovery block")
	}
	for _, table := range tables {
		c := tableContext(t, ddb, table)
		on := eval(t, "pitr", attr(t, "pitr", pitr[0].Body, "enabled").Expr, c).True()
		if want := table != "members"; on != want {
			t.Errorf("table %s: point-in-time recovery %v by default, want %v (members only describes running servers)", table, on, want)
		}
	}
	sse := nested(tb.Body, "server_side_encryption")
	if len(sse) != 1 || !eval(t, "sse", attr(t, "sse", sse[0].Body, "enabled").Expr, ctx).True() {
		t.Errorf("want server-side encryption")
	}

	env := taskEnvironment(t, s.dir(t, "modules/ecs"))
	jw := s.dir(t, "modules/jetway").block(t, "module", "ecs")
	for setting, input := range map[string]string{"JETWAY_QUOTA_TABLE": "quota", "JETWAY_REQUESTS_TABLE": "requests", "JETWAY_CACHE_TABLE": "cache",
		"JETWAY_MEMBERS_TABLE": "members", "JETWAY_CONFIG_TABLE": "config"} {
		if src := s.dir(t, "modules/ecs").source(env[setting].Range()); src != "var."+input+"_table_name" {
			t.Errorf("%s = %s, want var.%s_table_name", setting, src, input)
		}
		if src := s.dir(t, "modules/jetway").source(attr(t, "module ecs", jw.Body, input+"_table_name").Expr.Range()); src != "module.dynamodb."+input+"_table_name" {
			t.Errorf("modules/jetway: %s_table_name = %s", input, src)
		}
	}
}

// checkTableIndexes: the requests table has the keys-only index by_server
// (server S, ended_ms N) a survivor queries for a dead server's records; the
// config table has the keys-only audit indexes audit_tenant (audit_tenant S,
// audit_at S) and audit_all (audit_all S, audit_at S); each declares exactly
// its indexes' key attributes, and the other tables have none.
func checkTableIndexes(t *testing.T, ddb *tfDir, table *hclsyntax.Body) {
	t.Helper()
	want := map[string]struct {
		attrs   map[string]string
		indexes []string
	}{
		"requests": {map[string]string{"server": "S", "ended_ms": "N"}, []string{"by_server server ended_ms KEYS_ONLY"}},
		"config": {map[string]string{"audit_tenant": "S", "audit_all": "S", "audit_at": "S"},
			[]string{"audit_all audit_all audit_at KEYS_ONLY", "audit_tenant audit_tenant audit_at KEYS_ONLY"}},
	}
	for _, key := range []string{"requests", "config", "quota", "cache", "members"} {
		c := tableContext(t, ddb, key)
		attrs, indexes := map[string]string{}, []string{}
		for _, b := range nested(table, "dynamic") {
			forEach := eval(t, "for_each", attr(t, "dynamic", b.Body, "for_each").Expr, c)
			switch b.Labels[0] {
			case "attribute":
				for it := forEach.ElementIterator(); it.Next(); {
					k, v := it.Element()
					attrs[k.AsString()] = v.AsString()
				}
			case "global_secondary_index":
				content := nested(b.Body, "content")[0].Body
				for it := forEach.ElementIterator(); it.Next(); {
					_, v := it.Element()
					c.Variables["global_secondary_index"] = cty.ObjectVal(map[string]cty.Value{"value": v})
					indexes = append(indexes, strings.Join([]string{str2(t, content, "name", c), str2(t, content, "hash_key", c),
						str2(t, content, "range_key", c), str2(t, content, "projection_type", c)}, " "))
				}
			}
		}
		sort.Strings(indexes)
		w := want[key]
		if !maps.Equal(attrs, w.attrs) {
			t.Errorf("table %s: attributes beside pk %v, want %v", key, attrs, w.attrs)
		}
		if !slices.Equal(indexes, w.indexes) {
			t.Errorf("table %s: indexes %q, want %q", key, indexes, w.indexes)
		}
	}
}

// tableContext evaluates the dynamodb module's table resource for one key
// of its for_each: the module's variable defaults, its locals, each.
func tableContext(t *testing.T, ddb *tfDir, key string) *hcl.EvalContext {
	t.Helper()
	c := ddb.evalContext()
	c.Functions["contains"] = stdlib.ContainsFunc
	c.Functions["lookup"] = stdlib.LookupFunc
	locals := map[string]cty.Value{}
	// In dependency order: indexes and index_attributes read the two before.
	for _, name := range []string{"ephemeral", "requests_by_server", "config_audit", "indexes", "index_attributes"} {
		locals[name] = eval(t, "local."+name, ddb.local(t, name), c)
		c.Variables["local"] = cty.ObjectVal(locals)
	}
	c.Variables["each"] = cty.ObjectVal(map[string]cty.Value{"key": cty.StringVal(key), "value": cty.StringVal(key)})
	return c
}

func str2(t *testing.T, body *hclsyntax.Body, name string, ctx *hcl.EvalContext) string {
	t.Helper()
	return asString(t, name, eval(t, name, attr(t, "block", body, name).Expr, ctx))
}

// checkMetricsAreTheGatewaysOwn: autoscaling tracks ActiveSessions per task,
// and every Jetway metric the dashboard and alarms read is one the gateway writes.
func checkMetricsAreTheGatewaysOwn(t *testing.T, s *stack) {
	as := s.dir(t, "modules/autoscaling")
	if ns := asString(t, "metric_namespace", defaultOf(t, as, "metric_namespace")); ns != "Jetway" {
		t.Errorf("autoscaling namespace %q, want Jetway", ns)
	}
	pol := as.block(t, "resource", "aws_appautoscaling_policy", "sessions")
	var spec []*hclsyntax.Block
	for _, c := range nested(pol.Body, "target_tracking_scaling_policy_configuration") {
		spec = append(spec, nested(c.Body, "customized_metric_specification")...)
	}
	if len(spec) != 1 {
		t.Fatalf("sessions policy: want one customized metric")
	}
	if got := str2(t, spec[0].Body, "metric_name", nil); got != "ActiveSessions" {
		t.Errorf("sessions policy tracks %q, want ActiveSessions", got)
	}
	if got := str2(t, spec[0].Body, "statistic", nil); got != "Average" {
		t.Errorf("sessions policy statistic %q, want Average (the per-task mean of the dimensionless series)", got)
	}
	if len(nested(spec[0].Body, "dimensions")) != 0 {
		t.Errorf("sessions policy must read the dimensionless fleet series")
	}

	obs := s.dir(t, "modules/observability")
	if ns := asString(t, "metric_namespace", defaultOf(t, obs, "metric_namespace")); ns != "Jetway" {
		t.Errorf("observability namespace %q, want Jetway", ns)
	}
	used := map[string]bool{}
	// Dashboard entries [local.ns, "Metric", ...] and SEARCH expressions on {local.ns,...}.
	for _, f := range obs.files {
		hclsyntax.VisitAll(f.body, func(n hclsyntax.Node) hcl.Diagnostics {
			switch e := n.(type) {
			case *hclsyntax.TupleConsExpr:
				if len(e.Exprs) >= 2 && obs.source(e.Exprs[0].Range()) == "local.ns" {
					used[asString(t, "metric name", eval(t, "metric name", e.Exprs[1], nil))] = true
				}
			case *hclsyntax.TemplateExpr:
				src := obs.source(e.Range())
				if strings.Contains(src, "${local.ns},") {
					for _, m := range regexp.MustCompile(`MetricName=\\"(\w+)\\"`).FindAllStringSubmatch(src, -1) {
						used[m[1]] = true
					}
				}
			}
			return nil
		})
	}
	for _, b := range obs.blocks("resource") {
		if b.Labels[0] != "aws_cloudwatch_metric_alarm" {
			continue
		}
		if a, ok := b.Body.Attributes["namespace"]; ok && obs.source(a.Expr.Range()) == "local.ns" {
			used[str2(t, b.Body, "metric_name", nil)] = true
		}
	}
	for _, m := range emfMetrics {
		if !used[m] {
			t.Errorf("observability never shows the gateway metric %s", m)
		}
		delete(used, m)
	}
	for m := range used {
		t.Errorf("observability reads Jetway metric %q, which the gateway does not write", m)
	}
}

// checkOperationsTimingTable: the timing table of docs/operations.md states
// the modules' defaults and the server's documented defaults.
func checkOperationsTimingTable(t *testing.T, s *stack) {
	doc := readConfigurationDoc(t)
	ops := string(readRepoFile(t, "docs/operations.md"))
	start := strings.Index(ops, "| what | Terraform | gateway setting | default | rule |")
	if start < 0 {
		t.Fatal("docs/operations.md has no timing table (| what | Terraform | gateway setting | default | rule |)")
	}
	code := regexp.MustCompile("`([^`]+)`")
	rows := 0
	for _, line := range strings.Split(ops[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 6 {
			t.Errorf("docs/operations.md: short row %q", line)
			continue
		}
		rows++
		what, tfCell, setting, def := strings.TrimSpace(cells[1]), cells[2], cells[3], cells[4]
		m := code.FindStringSubmatch(def)
		if m == nil {
			t.Errorf("docs/operations.md: %s: no default", what)
			continue
		}
		want := m[1]
		if m := code.FindStringSubmatch(tfCell); m != nil {
			mod, variable, ok := strings.Cut(m[1], ".")
			if !ok {
				t.Errorf("docs/operations.md: %s: %q is not modules/<m>.<variable>", what, m[1])
				continue
			}
			v := defaultOf(t, s.dir(t, mod), variable)
			_, numErr := strconv.ParseInt(want, 10, 64)
			d, durErr := time.ParseDuration(want)
			switch {
			case numErr != nil && durErr != nil: // a string, such as a User-Agent prefix
				if got := asString(t, m[1], v); got != want {
					t.Errorf("docs/operations.md: %s: %s defaults to %q, the table says %s", what, m[1], got, want)
				}
			case durErr == nil:
				if got := asInt(t, m[1], v); time.Duration(got)*time.Second != d {
					t.Errorf("docs/operations.md: %s: %s defaults to %ds, the table says %s", what, m[1], got, want)
				}
			default:
				if got := asInt(t, m[1], v); strconv.FormatInt(got, 10) != want {
					t.Errorf("docs/operations.md: %s: %s defaults to %d, the table says %s", what, m[1], got, want)
				}
			}
		}
		if m := code.FindStringSubmatch(setting); m != nil {
			if got := doc.defaultOf(t, m[1]); got != want {
				t.Errorf("docs/operations.md: %s: docs/configuration.md gives %s the default %s, the table says %s", what, m[1], got, want)
			}
		}
	}
	if rows < 7 {
		t.Errorf("docs/operations.md: the timing table has %d rows, want heartbeat, idle timeout, interval, misses, drain, deregistration delay, stopTimeout", rows)
	}
}
