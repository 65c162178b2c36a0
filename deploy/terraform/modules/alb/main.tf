locals {
  short_name = substr(var.name, 0, 28)

  # What the ALB's health checks send as User-Agent ("ELB-HealthChecker/2.0"),
  # fixed by AWS: the prefix the task recognizes them by.
  health_check_user_agent = "ELB-HealthChecker/"
}

resource "aws_security_group" "alb" {
  name_prefix = "${var.name}-alb-"
  description = "Jetway load balancer: HTTPS in, task ports out"
  vpc_id      = var.vpc_id

  tags = merge(var.tags, { Name = "${var.name}-alb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "https" {
  for_each = toset(var.ingress_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "HTTPS (WebSocket) from clients"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_ingress_rule" "http" {
  for_each = toset(var.ingress_cidrs)

  security_group_id = aws_security_group.alb.id
  description       = "HTTP, redirected to HTTPS"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 80
  to_port           = 80
}

resource "aws_vpc_security_group_egress_rule" "app" {
  security_group_id = aws_security_group.alb.id
  description       = "Client traffic to the tasks' main port"
  cidr_ipv4         = var.vpc_cidr_block
  ip_protocol       = "tcp"
  from_port         = var.app_port
  to_port           = var.app_port
}

resource "aws_vpc_security_group_egress_rule" "health" {
  security_group_id = aws_security_group.alb.id
  description       = "Health checks to the tasks' admin port"
  cidr_ipv4         = var.vpc_cidr_block
  ip_protocol       = "tcp"
  from_port         = var.admin_port
  to_port           = var.admin_port
}

resource "aws_lb" "this" {
  name               = "${local.short_name}-alb"
  load_balancer_type = "application"
  internal           = false
  subnets            = var.public_subnet_ids
  security_groups    = [aws_security_group.alb.id]

  idle_timeout                     = var.idle_timeout
  drop_invalid_header_fields       = true
  enable_deletion_protection       = var.deletion_protection
  enable_cross_zone_load_balancing = true

  tags = var.tags
}

resource "aws_lb_target_group" "app" {
  name_prefix = "jw-"
  vpc_id      = var.vpc_id
  target_type = "ip"
  protocol    = "HTTP"
  port        = var.app_port

  deregistration_delay = var.deregistration_delay

  # Every check carries "User-Agent: ELB-HealthChecker/2.0", which a target
  # group cannot change. Only requests with it arm the task's self-drain
  # watch (anyone else may poll /readyz), so the task definition sets
  # JETWAY_HEALTH_CHECK_USER_AGENT to that prefix explicitly
  # (output health_check_user_agent).
  health_check {
    enabled             = true
    protocol            = "HTTP"
    port                = var.admin_port
    path                = var.health_check_path
    matcher             = "200"
    interval            = var.health_check_interval
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.ssl_policy
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.app.arn
  }

  tags = var.tags
}

resource "aws_lb_listener" "http" {
  load_balancer_arn = aws_lb.this.arn
  port              = 80
  protocol          = "HTTP"

  default_action {
    type = "redirect"

    redirect {
      protocol    = "HTTPS"
      port        = "443"
      status_code = "HTTP_301"
    }
  }

  tags = var.tags
}
