package terraform

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

var (
	accountID = regexp.MustCompile(`(^|[^0-9])[0-9]{12}([^0-9]|$)`)
	region    = regexp.MustCompile(`\b(us|eu|ap|sa|ca|me|af|il|mx|cn)-(gov-|iso-|isob-)?(north|south|east|west|central|northeast|southeast|northwest|southwest)-[0-9]\b`)
	arn       = regexp.MustCompile(`arn:aws`)
	iamAction = regexp.MustCompile(`^[a-z0-9-]+:[A-Za-z0-9]+$`)
)

// literalStrings calls fn for every literal string in the directory's code:
// quoted strings, the literal parts of templates and heredocs, and quoted
// object keys.
func literalStrings(d *tfDir, fn func(s string, rng hcl.Range)) {
	for _, f := range d.files {
		hclsyntax.VisitAll(f.body, func(n hclsyntax.Node) hcl.Diagnostics {
			lit, ok := n.(*hclsyntax.LiteralValueExpr)
			if ok && lit.Val.Type() == cty.String && !lit.Val.IsNull() {
				fn(lit.Val.AsString(), lit.SrcRange)
			}
			return nil
		})
	}
}

// checkNoHardcodedAccountsRegionsOrARNs: every account, region and ARN comes
// from variables or data sources (aws_caller_identity, aws_region,
// aws_partition), so the same code serves every account and region.
func checkNoHardcodedAccountsRegionsOrARNs(t *testing.T, s *stack) {
	checked := 0
	for _, d := range s.sortedDirs() {
		literalStrings(d, func(str string, rng hcl.Range) {
			checked++
			switch {
			case accountID.MatchString(str):
				t.Errorf("%s: literal account id in %q", rng, str)
			case region.MatchString(str):
				t.Errorf("%s: literal region in %q", rng, str)
			case arn.MatchString(str):
				t.Errorf("%s: literal ARN in %q (build it from data.aws_partition and variables)", rng, str)
			}
		})
	}
	if checked < 200 {
		t.Fatalf("only %d literal strings checked; the walk is broken", checked)
	}
}

// TestTheLiteralCheckCatches proves the patterns above find what they must.
func TestTheLiteralCheckCatches(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"123456789012", "arn:aws:iam::123456789012:role/x", "arn:aws:s3:::bucket", "us-east-1",
		"https://cognito-idp.eu-west-1.amazonaws.com/pool", "ap-southeast-2", "us-gov-west-1",
	} {
		if !accountID.MatchString(bad) && !region.MatchString(bad) && !arn.MatchString(bad) {
			t.Errorf("%q is not caught", bad)
		}
	}
	for _, good := range []string{
		"arn:${local.partition}:bedrock:", "amazon.nova-lite-v1:0", "us.anthropic.claude-3-5-haiku-20241022-v1:0",
		"10737418240", "0.0.0.0/0", "ELBSecurityPolicy-TLS13-1-2-2021-06",
	} {
		if accountID.MatchString(good) || region.MatchString(good) || arn.MatchString(good) {
			t.Errorf("%q is flagged but is fine", good)
		}
	}
}

// iamStatement is one policy statement found in the code.
type iamStatement struct {
	where   string
	effect  string
	actions []string
}

// iamStatements finds every statement of every aws_iam_policy_document (also
// inside dynamic "statement" blocks) and every jsonencode'd Action/NotAction.
// Actions must be literal lists, so no wildcard can hide behind a variable.
func iamStatements(t *testing.T, d *tfDir) []iamStatement {
	t.Helper()
	var out []iamStatement
	var walk func(where string, body *hclsyntax.Body)
	walk = func(where string, body *hclsyntax.Body) {
		for _, b := range body.Blocks {
			switch {
			case b.Type == "statement":
				out = append(out, statementOf(t, where, b.Body))
			case b.Type == "dynamic" && len(b.Labels) == 1 && b.Labels[0] == "statement":
				for _, c := range nested(b.Body, "content") {
					out = append(out, statementOf(t, where+" (dynamic)", c.Body))
				}
			default:
				walk(where, b.Body)
			}
		}
	}
	for _, b := range d.blocks("data") {
		if b.Labels[0] == "aws_iam_policy_document" {
			walk(fmt.Sprintf("%s: data.aws_iam_policy_document.%s", d.rel, b.Labels[1]), b.Body)
		}
	}
	for _, f := range d.files {
		for _, key := range []string{"Action", "NotAction"} {
			for _, v := range objectItems(f.body, key) {
				where := fmt.Sprintf("%s: %s", v.Range(), key)
				val := eval(t, where, v, nil)
				var actions []string
				if val.Type() == cty.String {
					actions = []string{val.AsString()}
				} else {
					actions = stringsOf(t, where, val)
				}
				out = append(out, iamStatement{where: where, effect: "json", actions: actions})
			}
		}
	}
	return out
}

func statementOf(t *testing.T, where string, body *hclsyntax.Body) iamStatement {
	t.Helper()
	st := iamStatement{where: where, effect: "Allow"}
	if a, ok := body.Attributes["sid"]; ok {
		st.where += " sid " + eval(t, where, a.Expr, nil).AsString()
	}
	if a, ok := body.Attributes["effect"]; ok {
		st.effect = eval(t, st.where, a.Expr, nil).AsString()
	}
	found := false
	for _, name := range []string{"actions", "not_actions"} {
		a, ok := body.Attributes[name]
		if !ok {
			continue
		}
		found = true
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() || !v.IsWhollyKnown() {
			t.Errorf("%s: %s must be a literal list (got %s)", st.where, name, a.Expr.Range())
			continue
		}
		st.actions = append(st.actions, stringsOf(t, st.where, v)...)
	}
	if !found {
		t.Errorf("%s: statement without actions", st.where)
	}
	return st
}

// checkNoWildcardIAMActions: no statement, Allow or Deny, names "*",
// "service:*" or any other wildcard action; each role gets the actions it needs.
func checkNoWildcardIAMActions(t *testing.T, s *stack) {
	total := 0
	for _, d := range s.sortedDirs() {
		for _, st := range iamStatements(t, d) {
			total++
			if len(st.actions) == 0 {
				t.Errorf("%s: no actions", st.where)
			}
			for _, a := range st.actions {
				if strings.Contains(a, "*") {
					t.Errorf("%s: wildcard action %q", st.where, a)
				}
				if !iamAction.MatchString(a) {
					t.Errorf("%s: %q is not a service:Action name", st.where, a)
				}
			}
		}
	}
	if total < 12 {
		t.Fatalf("found only %d IAM statements; the walk is broken", total)
	}
}

// checkTaskRoleIsLeastPrivilege pins the gateway's task role to exactly what
// the issue allows: streaming from the configured models (in the configured
// regions, and the tenants' application inference profiles with what they
// copy from), assuming exactly the placements' roles, its three tables
// (and the members table and the requests table's by_server index, each for
// exactly what membership and takeovers need; the config table and its two
// audit indexes for exactly what the control plane needs), publishing to the
// quota alerts topic, its delivery stream and its own log group.
func checkTaskRoleIsLeastPrivilege(t *testing.T, s *stack) {
	iam := s.dir(t, "modules/iam")
	doc := iam.block(t, "data", "aws_iam_policy_document", "task")
	got := map[string][]string{}
	for _, st := range iamStatements(t, &tfDir{rel: iam.rel, files: []*tfFile{{path: "task", body: &hclsyntax.Body{Blocks: hclsyntax.Blocks{doc}}}}}) {
		if st.effect != "Allow" {
			t.Errorf("%s: effect %q", st.where, st.effect)
		}
		got[st.where] = st.actions
	}
	want := map[string]string{
		"BedrockStream":     "bedrock:InvokeModelWithResponseStream",
		"BedrockGuardrails": "bedrock:ApplyGuardrail",
		"Tables":            "dynamodb:DescribeTable,dynamodb:GetItem,dynamodb:PutItem,dynamodb:UpdateItem,dynamodb:DeleteItem,dynamodb:Query",
		"Members":           "dynamodb:GetItem,dynamodb:PutItem,dynamodb:UpdateItem,dynamodb:DeleteItem,dynamodb:Scan",
		"RequestsByServer":  "dynamodb:Query",
		"Config":            "dynamodb:GetItem,dynamodb:PutItem,dynamodb:UpdateItem,dynamodb:DeleteItem,dynamodb:Query,dynamodb:Scan,dynamodb:BatchGetItem",
		"ConfigAudit":       "dynamodb:Query",
		"QuotaAlerts":       "sns:Publish",
		"UsageStream":       "firehose:PutRecord,firehose:PutRecordBatch",
		"OwnLogGroup":       "logs:CreateLogStream,logs:PutLogEvents",
		"XRayTraces":        "xray:PutTraceSegments,xray:PutTelemetryRecords", // only with tracing (the collector sidecar)
		"PlacementRoles":    "sts:AssumeRole",                                 // only with bedrock_assume_role_arns (placements in other accounts)
	}
	if len(got) != len(want) {
		t.Errorf("task role has %d statements, want %d: %v", len(got), len(want), got)
	}
	for where, actions := range got {
		sid := where[strings.LastIndex(where, " ")+1:]
		if want[sid] != strings.Join(actions, ",") {
			t.Errorf("%s: actions %v, want %s", where, actions, want[sid])
		}
	}
	resources := map[string]string{
		"BedrockStream":    "local.bedrock_resources",
		"Tables":           "var.dynamodb_table_arns",
		"Members":          "[var.members_table_arn]",
		"RequestsByServer": "[var.requests_by_server_index_arn]",
		"Config":           "[var.config_table_arn]",
		"ConfigAudit":      "var.config_audit_index_arns",
		"QuotaAlerts":      "[var.quota_alert_topic_arn]",
		"UsageStream":      "[var.firehose_stream_arn]",
		"OwnLogGroup":      "[var.log_group_arn, local.log_streams]",
		"XRayTraces":       `["*"]`, // X-Ray's Put actions have no resource-level permissions
		"PlacementRoles":   "var.bedrock_assume_role_arns",
	}
	statements := nested(doc.Body, "statement")
	for _, d := range nested(doc.Body, "dynamic") {
		statements = append(statements, nested(d.Body, "content")...)
	}
	for _, b := range statements {
		sid := eval(t, "sid", attr(t, "statement", b.Body, "sid").Expr, nil).AsString()
		want, ok := resources[sid]
		if !ok {
			continue
		}
		if got := iam.source(attr(t, sid, b.Body, "resources").Expr.Range()); got != want {
			t.Errorf("statement %s: resources = %s, want %s", sid, got, want)
		}
	}

	// Each of those ARNs is the resource the statement is meant for. The
	// config table stays out of the broad Tables statement: table_arns is
	// an allow-list of the three tables, not "all but some".
	jw := s.dir(t, "modules/jetway")
	call := jw.block(t, "module", "iam")
	for input, want := range map[string]string{
		"dynamodb_table_arns":          "values(module.dynamodb.table_arns)",
		"members_table_arn":            "module.dynamodb.members_table_arn",
		"requests_by_server_index_arn": "module.dynamodb.requests_by_server_index_arn",
		"config_table_arn":             "module.dynamodb.config_table_arn",
		"config_audit_index_arns":      "module.dynamodb.config_audit_index_arns",
		"quota_alert_topic_arn":        "module.observability.quota_alert_topic_arn",
		"bedrock_assume_role_arns":     "var.bedrock_assume_role_arns",
		"bedrock_regions":              "var.bedrock_regions",
		"bedrock_tenant_profile_arns":  "[for p in aws_bedrock_inference_profile.tenant : p.arn]",
		"bedrock_profile_source_arns":  "distinct([for p in var.tenant_inference_profiles : p.source_arn])",
	} {
		if got := jw.source(attr(t, "module iam", call.Body, input).Expr.Range()); got != want {
			t.Errorf("modules/jetway: module iam gets %s = %s, want %s", input, got, want)
		}
	}
	ddb := s.dir(t, "modules/dynamodb")
	for output, want := range map[string]string{
		"table_arns":              `{ for k, t in aws_dynamodb_table.this : k => t.arn if contains(["quota", "requests", "cache"], k) }`,
		"config_table_arn":        `aws_dynamodb_table.this["config"].arn`,
		"config_audit_index_arns": `[for i in local.config_audit : "${aws_dynamodb_table.this["config"].arn}/index/${i.name}"]`,
	} {
		o := ddb.block(t, "output", output)
		if got := ddb.source(attr(t, "output "+output, o.Body, "value").Expr.Range()); got != want {
			t.Errorf("modules/dynamodb: output %s = %s, want %s", output, got, want)
		}
	}
	obs := s.dir(t, "modules/observability")
	o := obs.block(t, "output", "quota_alert_topic_arn")
	if got := obs.source(attr(t, "output quota_alert_topic_arn", o.Body, "value").Expr.Range()); got != "aws_sns_topic.quota_alerts.arn" {
		t.Errorf("modules/observability: output quota_alert_topic_arn = %s, want aws_sns_topic.quota_alerts.arn", got)
	}
}

// checkQuotaAlertsTopic: the quota alerts topic is encrypted at rest, the
// task gets its ARN as JETWAY_ALERT_SNS_TOPIC_ARN, and no IAM statement of
// any module names an SNS action but the task role's Publish on it (pinned
// by checkTaskRoleIsLeastPrivilege).
func checkQuotaAlertsTopic(t *testing.T, s *stack) {
	obs := s.dir(t, "modules/observability")
	topic := obs.block(t, "resource", "aws_sns_topic", "quota_alerts")
	// The module has no key of its own; the AWS managed key's policy lets the
	// account's principals use it through SNS, so Publish is all the task needs.
	if got := str2(t, topic.Body, "kms_master_key_id", nil); got != "alias/aws/sns" {
		t.Errorf("quota alerts topic: kms_master_key_id %q, want alias/aws/sns", got)
	}
	sub := obs.block(t, "resource", "aws_sns_topic_subscription", "quota_alert_email")
	if got := obs.source(attr(t, "subscription", sub.Body, "topic_arn").Expr.Range()); got != "aws_sns_topic.quota_alerts.arn" {
		t.Errorf("quota alert subscriptions go to %s, want aws_sns_topic.quota_alerts.arn", got)
	}
	if got := obs.source(attr(t, "subscription", sub.Body, "for_each").Expr.Range()); got != "toset(var.quota_alert_emails)" {
		t.Errorf("quota alert subscriptions for_each = %s, want toset(var.quota_alert_emails)", got)
	}

	ecs := s.dir(t, "modules/ecs")
	env := taskEnvironment(t, ecs)
	if env["JETWAY_ALERT_SNS_TOPIC_ARN"] == nil {
		t.Fatalf("the task does not set JETWAY_ALERT_SNS_TOPIC_ARN")
	}
	if src := ecs.source(env["JETWAY_ALERT_SNS_TOPIC_ARN"].Range()); src != "var.quota_alert_topic_arn" {
		t.Errorf("JETWAY_ALERT_SNS_TOPIC_ARN = %s, want var.quota_alert_topic_arn", src)
	}
	jw := s.dir(t, "modules/jetway")
	if src := jw.source(attr(t, "module ecs", jw.block(t, "module", "ecs").Body, "quota_alert_topic_arn").Expr.Range()); src != "module.observability.quota_alert_topic_arn" {
		t.Errorf("modules/jetway: module ecs gets quota_alert_topic_arn = %s, want module.observability.quota_alert_topic_arn", src)
	}

	publishers := 0
	for _, d := range s.sortedDirs() {
		for _, st := range iamStatements(t, d) {
			for _, a := range st.actions {
				if !strings.HasPrefix(a, "sns:") {
					continue
				}
				if a != "sns:Publish" || !strings.HasSuffix(st.where, "data.aws_iam_policy_document.task sid QuotaAlerts") {
					t.Errorf("%s: %s; the only SNS permission is the task role's Publish on the quota alerts topic", st.where, a)
					continue
				}
				publishers++
			}
		}
	}
	if publishers != 1 {
		t.Errorf("found %d grants of sns:Publish to the task role, want 1", publishers)
	}
}

// checkAssumeRoleOnlyPlacementRoles: sts:AssumeRole appears only in trust
// policies (the *_assume documents, which name a service principal) and in
// the task role's PlacementRoles statement, on bedrock_assume_role_arns and
// only when that list is not empty; the tenants' inference profiles are
// tagged for cost allocation with tags the variable cannot override.
func checkAssumeRoleOnlyPlacementRoles(t *testing.T, s *stack) {
	grants := 0
	for _, d := range s.sortedDirs() {
		for _, st := range iamStatements(t, d) {
			for _, a := range st.actions {
				if !strings.HasPrefix(a, "sts:") {
					continue
				}
				switch {
				case strings.Contains(st.where, "_assume"):
				case a == "sts:AssumeRole" && strings.HasSuffix(st.where, "data.aws_iam_policy_document.task (dynamic) sid PlacementRoles"):
					grants++
				default:
					t.Errorf("%s: %s; the task role may only assume bedrock_assume_role_arns (PlacementRoles)", st.where, a)
				}
			}
		}
	}
	if grants != 1 {
		t.Errorf("found %d PlacementRoles grants of sts:AssumeRole, want 1", grants)
	}
	iam := s.dir(t, "modules/iam")
	doc := iam.block(t, "data", "aws_iam_policy_document", "task")
	found := false
	for _, d := range nested(doc.Body, "dynamic") {
		for _, c := range nested(d.Body, "content") {
			if eval(t, "sid", attr(t, "statement", c.Body, "sid").Expr, nil).AsString() != "PlacementRoles" {
				continue
			}
			found = true
			if got := iam.source(attr(t, "dynamic statement", d.Body, "for_each").Expr.Range()); got != "length(var.bedrock_assume_role_arns) > 0 ? [1] : []" {
				t.Errorf("PlacementRoles: for_each = %s; want no statement at all without bedrock_assume_role_arns", got)
			}
		}
	}
	if !found {
		t.Errorf("modules/iam: no dynamic PlacementRoles statement")
	}
	if def := iam.defaults()["bedrock_assume_role_arns"]; !def.IsKnown() || def.LengthInt() != 0 {
		t.Errorf("modules/iam: bedrock_assume_role_arns must default to empty")
	}

	jw := s.dir(t, "modules/jetway")
	profile := jw.block(t, "resource", "aws_bedrock_inference_profile", "tenant")
	tags := jw.source(attr(t, "aws_bedrock_inference_profile.tenant", profile.Body, "tags").Expr.Range())
	for _, want := range []string{`"jetway:tenant" = each.value.tenant`, `"jetway:model"  = each.value.model`} {
		if !strings.Contains(tags, want) {
			t.Errorf("aws_bedrock_inference_profile.tenant: tags %s lack %s", tags, want)
		}
	}
	if i, j := strings.Index(tags, "each.value.tags"), strings.Index(tags, `"jetway:tenant"`); i < 0 || j < i {
		t.Errorf("aws_bedrock_inference_profile.tenant: tags %s: the cost allocation tags must come last (the variable's tags cannot replace them)", tags)
	}
}
