package terraform

import "testing"

// TestStack parses the Terraform tree once and runs every check on it.
// Run one with, for example, go test ./deploy/terraform -run TestStack/Backend.
func TestStack(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	checks := []struct {
		name  string
		check func(*testing.T, *stack)
	}{
		{"Layout", checkLayout},
		{"VariablesDeclaredAndUsed", checkVariablesDeclaredAndUsed},
		{"LocalsDeclaredAndUsed", checkLocalsDeclaredAndUsed},
		{"OutputsDescribed", checkOutputsDescribed},
		{"ModulesAreLocalAndCalled", checkModulesAreLocalAndCalled},
		{"EnvironmentsShareOneModule", checkEnvironmentsShareOneModule},
		{"READMEs", checkREADMEs},
		{"NoHardcodedAccountsRegionsOrARNs", checkNoHardcodedAccountsRegionsOrARNs},
		{"NoWildcardIAMActions", checkNoWildcardIAMActions},
		{"TaskRoleIsLeastPrivilege", checkTaskRoleIsLeastPrivilege},
		{"QuotaAlertsTopic", checkQuotaAlertsTopic},
		{"AssumeRoleOnlyPlacementRoles", checkAssumeRoleOnlyPlacementRoles},
		{"TenantInferenceProfiles", checkTenantInferenceProfiles},
		{"TaskEnvironmentIsDocumented", checkTaskEnvironmentIsDocumented},
		{"PortsAndHealthCheckMatchServer", checkPortsAndHealthCheckMatchServer},
		{"TimeoutsMatchServer", checkTimeoutsMatchServer},
		{"OperationsTimingTable", checkOperationsTimingTable},
		{"TaskHardening", checkTaskHardening},
		{"DynamoDBTables", checkDynamoDBTables},
		{"MetricsAreTheGatewaysOwn", checkMetricsAreTheGatewaysOwn},
		{"GlueColumnsEqualUsageRecord", checkGlueColumnsEqualUsageRecord},
		{"PartitionsMatchUsageRecord", checkPartitionsMatchUsageRecord},
		{"ExampleTfvars", checkExampleTfvars},
		{"Backend", checkBackend},
		{"TenantsFileTemplates", checkTenantsFileTemplates},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.check(t, s) })
	}
}
