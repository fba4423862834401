-- wrk script: each connection alternates POST /v1/allocations and DELETE of what it got.
local token = os.getenv("JITGPU_BENCH_TOKEN")
local pending = {}

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. token
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  local id = table.remove(pending)
  if id then
    return wrk.format("DELETE", "/v1/allocations/" .. id)
  end
  return wrk.format("POST", "/v1/allocations", nil, '{"gpu_count": 1, "use_holds": false}')
end

function response(status, headers, body)
  if status == 201 or status == 202 then
    local id = string.match(body, '"id":"(alloc_[0-9a-f]+)"')
    if id then table.insert(pending, id) end
  end
end

function done(summary, latency, requests)
  local p = {50, 90, 99}
  io.write("JSON ")
  io.write(string.format('{"requests": %d, "seconds": %.3f, "errors": %d',
    summary.requests, summary.duration / 1e6,
    summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.status + summary.errors.timeout))
  for _, q in ipairs(p) do
    io.write(string.format(', "p%d_ms": %.3f', q, latency:percentile(q) / 1000))
  end
  io.write("}\n")
end
