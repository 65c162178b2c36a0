output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "vpc_cidr_block" {
  description = "CIDR block of the VPC."
  value       = aws_vpc.this.cidr_block
}

output "public_subnet_ids" {
  description = "Public subnets (the load balancer), one per AZ."
  value       = aws_subnet.public[*].id
}

output "private_subnet_ids" {
  description = "Private subnets (the ECS tasks), one per AZ."
  value       = aws_subnet.private[*].id
}

output "availability_zones" {
  description = "The AZs in use."
  value       = local.azs
}

output "nat_public_ips" {
  description = "Public addresses of the NAT gateways (egress IPs of the tasks)."
  value       = aws_eip.nat[*].public_ip
}
