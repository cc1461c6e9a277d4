"""PartiQL through boto3 and the AWS CLI: ExecuteStatement, BatchExecuteStatement and
ExecuteTransaction.

Each statement form runs against a real cluster and is checked against what the equivalent
low-level calls see, with DynamoDB's errors for what it refuses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from dynalab.cluster import LocalCluster
from tests.integration.conftest import DUMMY_CREDENTIALS, REGION, error_of, error_response

CLI_SECONDS_MAX = 60.0


@pytest.fixture(scope="module")
def music(dynamodb: Any, create_table: Callable[..., str]) -> str:
    """A table keyed by Artist and SongTitle, with a few songs."""
    name = create_table(dynamodb, "PartiQLMusic", ("Artist", "S"), ("SongTitle", "S"))
    for artist, title, year in [
        ("Acme Band", "Happy Day", 2019),
        ("Acme Band", "PartiQL Rocks", 2020),
        ("Acme Band", "Sad Night", 2021),
        ("No One You Know", "Call Me Today", 2018),
    ]:
        dynamodb.put_item(
            TableName=name,
            Item={
                "Artist": {"S": artist},
                "SongTitle": {"S": title},
                "Year": {"N": str(year)},
                "Info": {"M": {"Genre": {"S": "Rock"}, "Plays": {"N": "1"}}},
            },
        )
    return name


def titles(items: list[dict[str, Any]]) -> list[str]:
    return [item["SongTitle"]["S"] for item in items]


def test_select_by_full_key_reads_the_item(dynamodb: Any, music: str) -> None:
    reply = dynamodb.execute_statement(
        Statement=f"SELECT * FROM \"{music}\" WHERE Artist = ? AND SongTitle = 'PartiQL Rocks'",
        Parameters=[{"S": "Acme Band"}],
        ConsistentRead=True,
        ReturnConsumedCapacity="TOTAL",
    )
    assert titles(reply["Items"]) == ["PartiQL Rocks"]
    assert reply["ConsumedCapacity"]["CapacityUnits"] == 1.0
    missing = dynamodb.execute_statement(
        Statement=f"SELECT * FROM {music} WHERE Artist = 'Nobody' AND SongTitle = 'x'"
    )
    assert missing["Items"] == []


def test_select_by_partition_key_queries_in_order(dynamodb: Any, music: str) -> None:
    statement = f"SELECT SongTitle, Info.Genre FROM \"{music}\" WHERE Artist = 'Acme Band'"
    reply = dynamodb.execute_statement(Statement=statement)
    assert titles(reply["Items"]) == ["Happy Day", "PartiQL Rocks", "Sad Night"]
    assert reply["Items"][0] == {
        "SongTitle": {"S": "Happy Day"},
        "Info": {"M": {"Genre": {"S": "Rock"}}},
    }
    descending = dynamodb.execute_statement(Statement=statement + " ORDER BY SongTitle DESC")
    assert titles(descending["Items"]) == ["Sad Night", "PartiQL Rocks", "Happy Day"]
    ranged = dynamodb.execute_statement(
        Statement=f"SELECT * FROM {music} WHERE Artist = 'Acme Band' AND SongTitle > 'Happy Day'"
        ' AND "Year" <= 2020'
    )
    assert titles(ranged["Items"]) == ["PartiQL Rocks"]
    prefixed = dynamodb.execute_statement(
        Statement=f"SELECT * FROM {music} WHERE Artist = 'Acme Band' "
        "AND begins_with(SongTitle, 'Sad')"
    )
    assert titles(prefixed["Items"]) == ["Sad Night"]


def test_select_with_in_reads_each_key_and_pages(dynamodb: Any, music: str) -> None:
    statement = (
        f"SELECT * FROM {music} WHERE Artist IN ['No One You Know', 'Acme Band'] ORDER BY Artist"
    )
    whole = dynamodb.execute_statement(Statement=statement)
    assert titles(whole["Items"]) == ["Happy Day", "PartiQL Rocks", "Sad Night", "Call Me Today"]
    seen: list[str] = []
    request: dict[str, Any] = {"Statement": statement, "Limit": 2}
    for _ in range(10):
        page = dynamodb.execute_statement(**request)
        seen.extend(titles(page["Items"]))
        if "NextToken" not in page:
            break
        request["NextToken"] = page["NextToken"]
    assert seen == titles(whole["Items"])


def test_select_without_a_key_scans_with_a_filter(dynamodb: Any, music: str) -> None:
    reply = dynamodb.execute_statement(
        Statement=f'SELECT SongTitle FROM {music} WHERE "Year" BETWEEN 2019 AND 2020 '
        "AND Info.Genre = 'Rock' AND attribute_type(Info, 'M') AND Absent IS MISSING"
    )
    assert sorted(titles(reply["Items"])) == ["Happy Day", "PartiQL Rocks"]
    everything = dynamodb.execute_statement(Statement=f'SELECT * FROM "{music}"')
    assert len(everything["Items"]) == 4


def test_insert_update_delete_with_returning(dynamodb: Any, music: str) -> None:
    dynamodb.execute_statement(
        Statement=f"INSERT INTO {music} VALUE {{'Artist': 'New', 'SongTitle': ?, "
        "'Tags': <<'a', 'b'>>, 'Plays': 0, 'Notes': ['x'], 'Gone': MISSING}",
        Parameters=[{"S": "Song"}],
    )
    key = {"Artist": {"S": "New"}, "SongTitle": {"S": "Song"}}
    item = dynamodb.get_item(TableName=music, Key=key)["Item"]
    assert item["Tags"] == {"SS": ["a", "b"]} and "Gone" not in item
    status, code, message = error_of(
        lambda: dynamodb.execute_statement(
            Statement=f"INSERT INTO {music} VALUE {{'Artist': 'New', 'SongTitle': 'Song'}}"
        )
    )
    assert (status, code, message) == (
        400,
        "DuplicateItemException",
        "Duplicate primary key exists in table",
    )
    reply = dynamodb.execute_statement(
        Statement=f"UPDATE {music} SET Plays = Plays + 2 SET Tags = set_add(Tags, <<'c'>>) "
        "SET Notes = list_append(Notes, ['y']) REMOVE Extra "
        "WHERE Artist = 'New' AND SongTitle = 'Song' AND Plays = 0 RETURNING MODIFIED NEW *"
    )
    assert reply["Items"] == [
        {
            "Plays": {"N": "2"},
            "Tags": {"SS": ["a", "b", "c"]},
            "Notes": {"L": [{"S": "x"}, {"S": "y"}]},
        }
    ]
    failed = error_response(
        lambda: dynamodb.execute_statement(
            Statement=f"UPDATE {music} SET Plays = 9 WHERE Artist = 'New' AND SongTitle = 'Song' "
            "AND Plays = 0",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    )
    assert failed["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed["Item"]["Plays"] == {"N": "2"}
    absent = error_of(
        lambda: dynamodb.execute_statement(
            Statement=f"UPDATE {music} SET Plays = 1 WHERE Artist = 'Nobody' AND SongTitle = 'x'"
        )
    )
    assert absent[1] == "ConditionalCheckFailedException"
    deleted = dynamodb.execute_statement(
        Statement=f"DELETE FROM {music} WHERE Artist = 'New' AND SongTitle = 'Song' "
        "RETURNING ALL OLD *"
    )
    assert deleted["Items"][0]["Plays"] == {"N": "2"}
    assert "Item" not in dynamodb.get_item(TableName=music, Key=key)


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("SELECT * FROM", "Statement wasn't well formed, can't be processed: "),
        ("CREATE TABLE x", "Statement wasn't well formed, can't be processed: Expected data"),
        ("SELECT COUNT(*) FROM PartiQLMusic", "Unexpected path component at 1:8:5"),
        (
            "DELETE FROM PartiQLMusic WHERE Artist = 'a'",
            "Where clause does not contain a mandatory equality on all key attributes",
        ),
        (
            "UPDATE PartiQLMusic SET a = 1 WHERE Artist = 'a' OR SongTitle = 'b'",
            "Where clause does not contain a mandatory equality on all key attributes",
        ),
        (
            "SELECT * FROM PartiQLMusic ORDER BY SongTitle",
            "Must have WHERE clause in the statement when using ORDER BY clause.",
        ),
        (
            "SELECT * FROM PartiQLMusic WHERE Artist = ?",
            "Number of parameters in request and statement don't match.",
        ),
        (
            "INSERT INTO PartiQLMusic VALUE {'Artist': 'a'}, {'Artist': 'b'}",
            "Unsupported operation: Inserting multiple items",
        ),
    ],
)
def test_refusals(dynamodb: Any, music: str, statement: str, message: str) -> None:
    status, code, text = error_of(lambda: dynamodb.execute_statement(Statement=statement))
    assert (status, code) == (400, "ValidationException")
    assert text.startswith(message), text


def test_a_missing_table_and_a_bad_next_token(dynamodb: Any, music: str) -> None:
    status, code, _ = error_of(
        lambda: dynamodb.execute_statement(Statement='SELECT * FROM "NoSuchTable"')
    )
    assert (status, code) == (400, "ResourceNotFoundException")
    status, code, _ = error_of(
        lambda: dynamodb.execute_statement(
            Statement=f"SELECT * FROM {music}", NextToken="bm90IGEgdG9rZW4="
        )
    )
    assert (status, code) == (400, "ValidationException")
    status, code, text = error_of(lambda: dynamodb.execute_statement(Statement=""))
    assert (status, code) == (400, "ValidationException")
    assert "Member must have length greater than or equal to 1" in text


def test_batch_reads_and_writes_answer_each_statement(dynamodb: Any, music: str) -> None:
    writes = dynamodb.batch_execute_statement(
        Statements=[
            {"Statement": f"INSERT INTO {music} VALUE {{'Artist': 'Batch', 'SongTitle': 'One'}}"},
            {
                "Statement": f"INSERT INTO {music} VALUE {{'Artist': 'Acme Band', "
                "'SongTitle': 'Happy Day'}"
            },
            {
                "Statement": f"UPDATE {music} SET n = 1 WHERE Artist = 'Batch' AND SongTitle = ?",
                "Parameters": [{"S": "Two"}],
            },
        ],
        ReturnConsumedCapacity="TOTAL",
    )["Responses"]
    assert writes[0] == {"TableName": music}
    assert writes[1]["Error"]["Code"] == "DuplicateItem"
    assert writes[2]["Error"]["Code"] == "ConditionalCheckFailed"
    reads = dynamodb.batch_execute_statement(
        Statements=[
            {"Statement": f"SELECT * FROM {music} WHERE Artist = 'Batch' AND SongTitle = 'One'"},
            {"Statement": f"SELECT * FROM {music} WHERE Artist = 'Batch' AND SongTitle = 'Zero'"},
            {"Statement": f"SELECT * FROM {music} WHERE Artist = 'Batch'"},
        ]
    )["Responses"]
    assert reads[0]["Item"]["SongTitle"] == {"S": "One"}
    assert reads[1] == {"TableName": music}
    assert reads[2]["Error"]["Code"] == "ValidationError"
    status, code, text = error_of(
        lambda: dynamodb.batch_execute_statement(
            Statements=[
                {"Statement": f"SELECT * FROM {music} WHERE Artist = 'a' AND SongTitle = 'b'"},
                {"Statement": f"DELETE FROM {music} WHERE Artist = 'a' AND SongTitle = 'b'"},
            ]
        )
    )
    assert (status, code) == (400, "ValidationException") and "together" in text
    too_many = [{"Statement": f"SELECT * FROM {music}"}] * 26
    status, code, text = error_of(lambda: dynamodb.batch_execute_statement(Statements=too_many))
    assert code == "ValidationException"
    assert "Member must have length less than or equal to 25" in text


def test_transactions_apply_all_or_nothing_with_idempotency(dynamodb: Any, music: str) -> None:
    statements = [
        {"Statement": f"INSERT INTO {music} VALUE {{'Artist': 'Txn', 'SongTitle': 'A', 'n': 1}}"},
        {
            "Statement": f"UPDATE {music} SET Plays = 5 WHERE Artist = ? AND SongTitle = ?",
            "Parameters": [{"S": "Acme Band"}, {"S": "Sad Night"}],
        },
        {
            "Statement": f"EXISTS(SELECT * FROM {music} WHERE Artist = 'Acme Band' "
            "AND SongTitle = 'Happy Day')"
        },
    ]
    dynamodb.execute_transaction(TransactStatements=statements, ClientRequestToken="token-1")
    # The same token and statements: answered again, nothing applied twice.
    dynamodb.execute_transaction(TransactStatements=statements, ClientRequestToken="token-1")
    other = [{"Statement": f"DELETE FROM {music} WHERE Artist = 'Txn' AND SongTitle = 'A'"}]
    _, code, _ = error_of(
        lambda: dynamodb.execute_transaction(TransactStatements=other, ClientRequestToken="token-1")
    )
    assert code == "IdempotentParameterMismatchException"
    cancelled = error_response(
        lambda: dynamodb.execute_transaction(
            TransactStatements=[
                {"Statement": f"INSERT INTO {music} VALUE {{'Artist': 'Txn', 'SongTitle': 'A'}}"},
                {
                    "Statement": f"UPDATE {music} SET Plays = 6 WHERE Artist = 'Acme Band' "
                    "AND SongTitle = 'Sad Night'"
                },
            ]
        )
    )
    assert cancelled["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in cancelled["CancellationReasons"]] == ["DuplicateItem", "None"]
    reads = dynamodb.execute_transaction(
        TransactStatements=[
            {"Statement": f"SELECT * FROM {music} WHERE Artist = 'Txn' AND SongTitle = 'A'"},
            {
                "Statement": f"SELECT Plays FROM {music} WHERE Artist = 'Acme Band' "
                "AND SongTitle = 'Sad Night'"
            },
        ]
    )["Responses"]
    assert reads[0]["Item"]["n"] == {"N": "1"}
    assert reads[1]["Item"] == {"Plays": {"N": "5"}}
    _, code, text = error_of(
        lambda: dynamodb.execute_transaction(
            TransactStatements=[
                {"Statement": f"SELECT * FROM {music} WHERE Artist = 'a' AND SongTitle = 'b'"},
                {"Statement": f"DELETE FROM {music} WHERE Artist = 'a' AND SongTitle = 'b'"},
            ]
        )
    )
    assert code == "ValidationException" and "both read and write" in text


def test_the_aws_cli_runs_statements(cluster: LocalCluster, music: str) -> None:
    aws = shutil.which("aws")
    assert aws is not None, "the AWS CLI comes with the dev extras"
    environment = dict(
        os.environ,
        AWS_ACCESS_KEY_ID=DUMMY_CREDENTIALS["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=DUMMY_CREDENTIALS["aws_secret_access_key"],
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    done = subprocess.run(
        [
            aws,
            "dynamodb",
            "execute-statement",
            "--endpoint-url",
            cluster.router_url,
            "--statement",
            f'SELECT SongTitle FROM "{music}" WHERE Artist = ?',
            "--parameters",
            '[{"S": "Acme Band"}]',
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=CLI_SECONDS_MAX,
        check=True,
    )
    assert titles(json.loads(done.stdout)["Items"])[0] == "Happy Day"


def test_an_index_is_read_by_its_key_and_writes_refuse_what_they_cannot_do(
    dynamodb: Any, table_name: Callable[[], str], music: str
) -> None:
    name = table_name()
    dynamodb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "Artist", "KeyType": "HASH"},
            {"AttributeName": "SongTitle", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "Artist", "AttributeType": "S"},
            {"AttributeName": "SongTitle", "AttributeType": "S"},
            {"AttributeName": "Year", "AttributeType": "N"},
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "ByYear",
                "KeySchema": [
                    {"AttributeName": "Artist", "KeyType": "HASH"},
                    {"AttributeName": "Year", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=name)
    for title, year in [("B", 2001), ("A", 2003), ("C", 2002)]:
        dynamodb.execute_statement(
            Statement=f"INSERT INTO \"{name}\" VALUE {{'Artist': 'x', 'SongTitle': ?, 'Year': ?}}",
            Parameters=[{"S": title}, {"N": str(year)}],
        )
    reply = dynamodb.execute_statement(
        Statement=f'SELECT SongTitle FROM "{name}"."ByYear" WHERE Artist = \'x\' '
        'AND "Year" >= 2002 ORDER BY "Year" DESC'
    )
    assert titles(reply["Items"]) == ["A", "C"]
    refusals = [
        (f"DELETE FROM \"{name}\".\"ByYear\" WHERE Artist = 'x' AND SongTitle = 'A'", "index"),
        (f"EXISTS(SELECT * FROM \"{name}\" WHERE Artist = 'x' AND SongTitle = 'A')", "EXISTS"),
    ]
    for statement, word in refusals:
        _, code, text = error_of(
            lambda statement=statement: dynamodb.execute_statement(Statement=statement)
        )
        assert code == "ValidationException" and word in text, text
    _, code, text = error_of(
        lambda: dynamodb.execute_statement(
            Statement=f"DELETE FROM \"{name}\" WHERE Artist = 'x' AND SongTitle = 'A'",
            NextToken="abc",
        )
    )
    assert code == "ValidationException" and "NextToken" in text
    _, code, text = error_of(
        lambda: dynamodb.execute_transaction(
            TransactStatements=[
                {"Statement": f"DELETE FROM \"{name}\" WHERE Artist = 'x' AND SongTitle = 'A'"},
                {
                    "Statement": f'UPDATE "{name}" SET n = 1 '
                    "WHERE Artist = 'x' AND SongTitle = 'A'"
                },
            ]
        )
    )
    assert code == "ValidationException" and "multiple operations on one item" in text
    _, code, text = error_of(
        lambda: dynamodb.execute_transaction(
            TransactStatements=[
                {"Statement": f'SELECT * FROM "{name}"."ByYear" WHERE Artist = \'x\''},
            ]
        )
    )
    assert code == "ValidationException" and "Reads on indices" in text


def test_a_batch_naming_one_item_twice_is_refused_and_tokens_bind_their_statement(
    dynamodb: Any, music: str
) -> None:
    get = f"SELECT * FROM {music} WHERE Artist = 'Acme Band' AND SongTitle = 'Happy Day'"
    _, code, text = error_of(
        lambda: dynamodb.batch_execute_statement(
            Statements=[{"Statement": get}, {"Statement": get}]
        )
    )
    assert (code, text) == ("ValidationException", "Provided list of item keys contains duplicates")
    statement = f"SELECT * FROM {music} WHERE Artist = ?"
    page = dynamodb.execute_statement(Statement=statement, Parameters=[{"S": "Acme Band"}], Limit=1)
    token = page["NextToken"]
    assert page["LastEvaluatedKey"]["SongTitle"] == {"S": "Happy Day"}
    following = dynamodb.execute_statement(
        Statement=statement, Parameters=[{"S": "Acme Band"}], Limit=1, NextToken=token
    )
    assert titles(following["Items"]) == ["PartiQL Rocks"]
    for other in ([{"S": "No One You Know"}], None):
        request: dict[str, Any] = {"Statement": statement, "NextToken": token}
        if other is None:
            request["Statement"] = f"SELECT * FROM {music}"
        else:
            request["Parameters"] = other
        _, code, _ = error_of(lambda request=request: dynamodb.execute_statement(**request))
        assert code == "ValidationException"


def test_a_table_arn_in_a_statement_names_no_table(dynamodb: Any, music: str) -> None:
    """PartiQL's table is a name: "table (Required) The table name to query" (Developer Guide,
    PartiQL statements), with no word of an ARN, unlike the TableName members since 2024. A
    quoted table ARN, of this Region or another, is a table that does not exist through each of
    the three operations, and nothing is written."""
    here = f"arn:aws:dynamodb:{REGION}:000000000000:table/{music}"
    elsewhere = f"arn:aws:dynamodb:eu-west-1:000000000000:table/{music}"
    key = "Artist = 'ByArn' AND SongTitle = 'One'"
    for arn in (here, elsewhere):
        writes = [
            f"INSERT INTO \"{arn}\" VALUE {{'Artist': 'ByArn', 'SongTitle': 'One'}}",
            f'UPDATE "{arn}" SET n = 1 WHERE {key}',
            f'DELETE FROM "{arn}" WHERE {key}',
        ]
        read = f'SELECT * FROM "{arn}" WHERE {key}'
        for statement in [read, *writes]:
            assert error_of(
                lambda statement=statement: dynamodb.execute_statement(Statement=statement)
            ) == (
                400,
                "ResourceNotFoundException",
                "Requested resource not found",
            )
            answer = dynamodb.batch_execute_statement(Statements=[{"Statement": statement}])
            assert [entry["Error"]["Code"] for entry in answer["Responses"]] == ["ResourceNotFound"]
        for statements in ([read], writes[:1]):
            status, code, _ = error_of(
                lambda statements=statements: dynamodb.execute_transaction(
                    TransactStatements=[{"Statement": text} for text in statements]
                )
            )
            assert (status, code) == (400, "ResourceNotFoundException")
    found = dynamodb.get_item(
        TableName=music,
        Key={"Artist": {"S": "ByArn"}, "SongTitle": {"S": "One"}},
        ConsistentRead=True,
    )
    assert "Item" not in found
