// What the SDK checks do, in Node.js (sdk_check.mjs) and in a browser (browser_check.mjs): with a
// DynamoDBClient for a dynalab router, create the table, write and read an item, and provoke
// three errors; return what the SDK made of each reply (its error name and message, parsed from
// `__type` and the message key) for the Python tests to check.
import {
  CreateTableCommand,
  DescribeTableCommand,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  ScanCommand,
  waitUntilTableExists,
} from "@aws-sdk/client-dynamodb";

export function clientFor(endpoint) {
  return new DynamoDBClient({
    endpoint,
    region: "us-east-1",
    credentials: { accessKeyId: "any", secretAccessKey: "any" },
    maxAttempts: 1,
  });
}

async function failure(client, command) {
  try {
    await client.send(command);
    return null;
  } catch (error) {
    return { name: error.name, message: error.message, status: error.$metadata?.httpStatusCode };
  }
}

export async function check(client, table) {
  await client.send(
    new CreateTableCommand({
      TableName: table,
      KeySchema: [{ AttributeName: "pk", KeyType: "HASH" }],
      AttributeDefinitions: [{ AttributeName: "pk", AttributeType: "S" }],
      BillingMode: "PAY_PER_REQUEST",
    }),
  );
  await waitUntilTableExists({ client, maxWaitTime: 30 }, { TableName: table });
  await client.send(
    new PutItemCommand({ TableName: table, Item: { pk: { S: "a" }, n: { N: "1" } } }),
  );
  const got = await client.send(new GetItemCommand({ TableName: table, Key: { pk: { S: "a" } } }));
  return {
    item: got.Item,
    conditional: await failure(
      client,
      new PutItemCommand({
        TableName: table,
        Item: { pk: { S: "a" } },
        ConditionExpression: "attribute_not_exists(pk)",
      }),
    ),
    notFound: await failure(client, new DescribeTableCommand({ TableName: "no-such-table" })),
    validation: await failure(client, new ScanCommand({ TableName: table, Limit: 0 })),
  };
}
