"""A stdio MCP server offering one AgentDojo run's tools (standard library only, so runtape
starts it in milliseconds): `tools/list` and `tools/call` are answered by `dojo.py`, which
holds the run's environment and executes the calls with agentdojo's own functions.

    python3 mcp_proxy.py http://127.0.0.1:PORT/e/KEY GROUP

GROUP (`web` or `app`) picks the tools this server offers; runtape labels each server's
results by its `trust`.
"""

import json
import sys
import urllib.request


def ask(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def main():
    base, group = sys.argv[1], sys.argv[2]
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": f"agentdojo-{group}", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": ask(f"{base}/tools/{group}")["tools"]}
        elif method == "tools/call":
            answer = ask(f"{base}/call", {"name": params["name"], "arguments": params.get("arguments")})
            result = {"content": [{"type": "text", "text": answer["text"]}], "isError": answer["isError"]}
        elif method == "ping":
            result = {}
        else:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": f"no method {method}"}}
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)


if __name__ == "__main__":
    main()
