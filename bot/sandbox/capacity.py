"""A local stand-in for EC2 Capacity Blocks and SageMaker training plans, which moto does not implement.

The clients it hands out are ordinary boto3 clients; botocore event handlers
(the mechanism botocore's own ``Stubber`` uses) answer
``DescribeCapacityReservations``, ``ListTrainingPlans`` and
``DescribeTrainingPlan`` from the records held here, page by page with
``NextToken`` as AWS does, and every answer is validated against AWS's service
model before it is returned. Unlike a ``Stubber`` it answers any number of
calls, so a long-running sandbox (and the scheduler) can watch reservations
count down, be extended, cancelled or disappear while the real
:class:`bot.adapters.aws.reservations.AwsReservationSource` reads them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.validate import ParamValidator

from bot.adapters.aws.session import make_client, new_session
from bot.config import EndpointSettings

DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
ACCOUNT = "123456789012"
_PARAMS = "kimi_sandbox_params"


class CapacityStandIn:
    """Capacity Blocks and training plans by region, served to boto3 clients."""

    def __init__(self, page_size: int = 2) -> None:
        self.page_size = page_size
        self.blocks: dict[str, dict[str, Any]] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ records
    def add_capacity_block(
        self, cr_id: str, *, region: str, zone: str, start: dt.datetime, end: dt.datetime,
        instance_type: str = "p6-b300.48xlarge", count: int = 1, state: str = "active",
    ) -> None:
        """A Capacity Block as ``describe_capacity_reservations`` lists it."""
        with self._lock:
            self.blocks[cr_id] = {
                "CapacityReservationId": cr_id,
                "OwnerId": ACCOUNT,
                "CapacityReservationArn": f"arn:aws:ec2:{region}:{ACCOUNT}:capacity-reservation/{cr_id}",
                "InstanceType": instance_type,
                "InstancePlatform": "Linux/UNIX",
                "AvailabilityZone": zone,
                "Tenancy": "default",
                "TotalInstanceCount": count,
                "AvailableInstanceCount": count if state == "active" else 0,
                "EbsOptimized": True,
                "EphemeralStorage": False,
                "State": state,
                "StartDate": start,
                "EndDate": end,
                "EndDateType": "limited",
                "InstanceMatchCriteria": "targeted",
                "CreateDate": start - dt.timedelta(days=7),
                "Tags": [{"Key": "aws:ec2capacityreservation:capacityReservationType", "Value": "capacity-block"}],
                "ReservationType": "capacity-block",
                "_region": region,
            }

    def add_training_plan(
        self, name: str, *, region: str, zone: str, start: dt.datetime, end: dt.datetime,
        instance_type: str = "ml.p6-b300.48xlarge", count: int = 1, status: str = "Active",
    ) -> str:
        """A HyperPod training plan; returns its ARN."""
        arn = f"arn:aws:sagemaker:{region}:{ACCOUNT}:training-plan/{name}"
        hours = int((end - start).total_seconds() // 3600)
        with self._lock:
            self.plans[name] = {
                "TrainingPlanArn": arn,
                "TrainingPlanName": name,
                "Status": status,
                "DurationHours": hours,
                "DurationMinutes": 0,
                "StartTime": start,
                "EndTime": end,
                "UpfrontFee": "0.00",
                "CurrencyCode": "USD",
                "TotalInstanceCount": count,
                "AvailableInstanceCount": count,
                "InUseInstanceCount": 0,
                "TargetResources": ["hyperpod-cluster"],
                "ReservedCapacitySummaries": [{
                    "ReservedCapacityArn": f"arn:aws:sagemaker:{region}:{ACCOUNT}:reserved-capacity/{name}-rc",
                    "ReservedCapacityType": "Instance",
                    "InstanceType": instance_type,
                    "TotalInstanceCount": count,
                    "Status": status,
                    "AvailabilityZone": zone,
                    "DurationHours": hours,
                    "DurationMinutes": 0,
                    "StartTime": start,
                    "EndTime": end,
                }],
                "_region": region,
            }
        return arn

    def cover(self, endpoint: EndpointSettings, start: dt.datetime, end: dt.datetime) -> str:
        """Reserve what the endpoint needs (a training plan for HyperPod, a Capacity Block for EKS); returns its id."""
        zone = endpoint.availability_zone or f"{endpoint.region}a"
        if endpoint.kind == "hyperpod":
            name = endpoint.reservation_id.rsplit("/", 1)[-1] if endpoint.reservation_id else f"{endpoint.name}-plan"
            return self.add_training_plan(name, region=endpoint.region, zone=zone, start=start, end=end,
                                          instance_type=endpoint.sagemaker_instance_type)
        cr_id = endpoint.reservation_id or f"cr-{hashlib.sha256(endpoint.name.encode()).hexdigest()[:17]}"
        self.add_capacity_block(cr_id, region=endpoint.region, zone=zone, start=start, end=end,
                                instance_type=endpoint.instance_type.removeprefix("ml."))
        return cr_id

    def extend(self, reservation: str, new_end: dt.datetime) -> None:
        """Move a Capacity Block's (by id) or training plan's (by name) end, as an extension does."""
        with self._lock:
            if reservation in self.blocks:
                self.blocks[reservation]["EndDate"] = new_end
            else:
                plan = self.plans[reservation]
                plan["EndTime"] = new_end
                for capacity in plan["ReservedCapacitySummaries"]:
                    capacity["EndTime"] = new_end

    def set_state(self, reservation: str, state: str) -> None:
        with self._lock:
            if reservation in self.blocks:
                self.blocks[reservation]["State"] = state
            else:
                self.plans[reservation]["Status"] = state

    def remove(self, reservation: str) -> None:
        with self._lock:
            self.blocks.pop(reservation, None)
            self.plans.pop(reservation, None)

    # ------------------------------------------------------------------ clients
    def client(self, service: str, region: str) -> Any:
        """A real boto3 client whose reservation calls this stand-in answers (nothing leaves the machine)."""
        session = new_session(region_name=region, **DUMMY_CREDENTIALS)
        # An unroutable endpoint: any call this stand-in does not answer fails at once instead of reaching AWS.
        client = make_client(service, region=region, endpoint_url="http://127.0.0.1:9", single_attempt=True, session=session)
        client.meta.events.register_first("before-parameter-build.*.*", self._capture)
        client.meta.events.register_first("before-call.*.*", lambda **kw: self._answer(region, **kw))
        return client

    def client_factory(self) -> Any:
        """``(service, region) -> client`` for :class:`AwsReservationSource`."""
        return self.client

    def _capture(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_PARAMS] = dict(params)

    def _answer(self, region: str, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        params = context.get(_PARAMS, {})
        handler = {
            "DescribeCapacityReservations": self._describe_capacity_reservations,
            "ListTrainingPlans": self._list_training_plans,
            "DescribeTrainingPlan": self._describe_training_plan,
        }.get(model.name)
        if handler is None:
            return None
        with self._lock:
            self.calls.append((region, model.name))
            response = handler(region, params)
        if "Error" in response:  # botocore raises the ClientError, as for a real 4xx answer
            return AWSResponse("http://127.0.0.1:9", 400, {}, None), response
        report = ParamValidator().validate(response, model.output_shape)
        if report.has_errors():  # the stand-in must never answer what AWS could not
            raise ValueError(f"sandbox answer to {model.name} does not fit AWS's model:\n{report.generate_report()}")
        return AWSResponse("http://127.0.0.1:9", 200, {}, None), response

    def _page(self, items: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        start = int(params.get("NextToken") or 0)
        size = int(params.get("MaxResults") or self.page_size)
        page: dict[str, Any] = {"items": items[start:start + size]}
        if start + size < len(items):
            page["NextToken"] = str(start + size)
        return page

    @staticmethod
    def _public(item: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in item.items() if not k.startswith("_")}

    def _describe_capacity_reservations(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        wanted_types: set[str] | None = None
        for f in params.get("Filters", []):
            if f.get("Name") == "instance-type":
                wanted_types = set(f.get("Values", []))
        items = [self._public(b) for b in self.blocks.values()
                 if b["_region"] == region and (wanted_types is None or b["InstanceType"] in wanted_types)]
        page = self._page(items, params)
        return {"CapacityReservations": page.pop("items"), **page}

    def _list_training_plans(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        items = [self._public(p) for p in self.plans.values() if p["_region"] == region]
        page = self._page(items, params)
        return {"TrainingPlanSummaries": page.pop("items"), **page}

    def _describe_training_plan(self, region: str, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("TrainingPlanName", "")).rsplit("/", 1)[-1]
        plan = self.plans.get(name)
        if plan is None or plan["_region"] != region:
            return {"Error": {"Code": "ResourceNotFound", "Message": f"Training plan {name} does not exist."},
                    "ResponseMetadata": {"HTTPStatusCode": 400}}
        return self._public(plan)
