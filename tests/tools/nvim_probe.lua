-- Run inside `nvim --headless` on a .pf file (tests/tools/test_editors.py): wait (poll)
-- for the language server's diagnostics, ask for hover and completion, write what was
-- seen as JSON to $PFC_PROBE_OUT, quit. Works on Neovim 0.7 and later.
local out = { filetype = vim.bo.filetype, commentstring = vim.bo.commentstring, version = tostring(vim.version().major) .. "."
                .. tostring(vim.version().minor) }
local timeout = tonumber(os.getenv("PFC_PROBE_TIMEOUT") or "60000")
local function attached()
  local get = vim.lsp.get_clients or vim.lsp.get_active_clients
  return #get({ bufnr = 0 }) > 0
end
out.attached = vim.wait(timeout, attached, 20)
out.got_diagnostics = vim.wait(timeout, function() return #vim.diagnostic.get(0) > 0 end, 20)
out.omnifunc = vim.bo.omnifunc
out.diagnostics = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(out.diagnostics, { lnum = d.lnum, col = d.col, message = d.message,
                                  source = d.source, severity = d.severity })
end
local function request(method, line, character)
  local params = { textDocument = vim.lsp.util.make_text_document_params(),
                   position = { line = line, character = character } }
  local answers = vim.lsp.buf_request_sync(0, method, params, timeout) or {}
  for _, answer in pairs(answers) do
    if answer.result ~= nil then
      return answer.result
    end
  end
  return vim.NIL
end
local hover = request("textDocument/hover", tonumber(os.getenv("PFC_HOVER_LINE")),
                      tonumber(os.getenv("PFC_HOVER_CHAR")))
out.hover = hover ~= vim.NIL and hover.contents.value or vim.NIL
local completion = request("textDocument/completion", tonumber(os.getenv("PFC_COMPLETE_LINE")),
                           tonumber(os.getenv("PFC_COMPLETE_CHAR")))
out.completion = {}
if completion ~= vim.NIL then
  for _, item in ipairs(completion.items or completion) do
    table.insert(out.completion, item.label)
  end
end
local file = io.open(os.getenv("PFC_PROBE_OUT"), "w")
file:write(vim.fn.json_encode(out))
file:close()
vim.cmd("qa!")
