-- pfc for Neovim 0.7 and later: `.pf` file type, the `pfc lsp` language server, colours.
--
-- Copy this file to ~/.config/nvim/lua/pfc.lua and call, from your init.lua:
--
--   require("pfc").setup({ targets = { "xdp", "nft" } })
--
-- (editors/neovim/init.lua is a complete init.lua that does this.) Options:
--   cmd      the server command; default { "pfc", "lsp" }
--            (or { "/path/to/pfc/.venv/bin/python", "-m", "pfc.lsp" })
--   targets  targets whose limits are reported while you type; a `# pfc: targets ...`
--            comment at the top of a file wins
--   api      how the server is started; default: the newest the running Neovim has:
--            "config"       vim.lsp.config + vim.lsp.enable      (0.11+)
--            "start"        vim.lsp.start + vim.fs.root          (0.10+)
--            "start_client" vim.lsp.start_client + buf_attach_client (0.7+, Debian 12)
-- Tested headless by tests/tools/test_editors.py (Debian 12's 0.7.2; 0.11.4 by hand).

local M = {}

local function has(version)
  return vim.fn.has("nvim-" .. version) == 1
end

--- The newest way to start the server that this Neovim has.
function M.best_api()
  if vim.lsp.config ~= nil and vim.lsp.enable ~= nil then
    return "config"
  elseif vim.lsp.start ~= nil and vim.fs ~= nil and vim.fs.root ~= nil then
    return "start"
  end
  return "start_client"
end

-- Keys Neovim does not map to the server itself: `gd` (definition) on every version;
-- before 0.10 also `K` (hover) and the omnifunc; before 0.11 `gr` (references; 0.11
-- has `grr`).
local function on_attach(_, buf)
  local opts = { buffer = buf, silent = true }
  vim.keymap.set("n", "gd", vim.lsp.buf.definition, opts)
  if not has("0.11") then
    vim.keymap.set("n", "gr", vim.lsp.buf.references, opts)
  end
  if not has("0.10") then
    vim.api.nvim_buf_set_option(buf, "omnifunc", "v:lua.vim.lsp.omnifunc")
    vim.keymap.set("n", "K", vim.lsp.buf.hover, opts)
  end
end

local function server(opts, root)
  return {
    name = "pfc",
    cmd = opts.cmd,
    root_dir = root,
    -- sent at start-up, and answered to workspace/configuration (section "pfc")
    init_options = { pfc = { targets = opts.targets } },
    settings = { pfc = { targets = opts.targets } },
    on_attach = on_attach,
  }
end

-- The project root of a file (the directory holding .git), else the file's directory.
local function root_of(file)
  local dir = vim.fn.fnamemodify(file, ":p:h")
  local git = vim.fn.finddir(".git", dir .. ";")
  if git ~= "" then
    return vim.fn.fnamemodify(git, ":p:h:h")
  end
  return dir
end

local clients = {} -- root -> client id (start_client: one server per project)

local function attach_with_start_client(opts, buf)
  local root = root_of(vim.api.nvim_buf_get_name(buf))
  local client = clients[root] and vim.lsp.get_client_by_id(clients[root])
  if client == nil or client.is_stopped() then
    clients[root] = vim.lsp.start_client(server(opts, root))
  end
  if clients[root] ~= nil then
    vim.lsp.buf_attach_client(buf, clients[root])
  end
end

local function attach_with_start(opts, buf)
  local file = vim.api.nvim_buf_get_name(buf)
  vim.lsp.start(server(opts, vim.fs.root(buf, { ".git" }) or vim.fs.dirname(file)))
end

local function colours()
  -- pfc's own semantic token types (0.9+ highlights them); the standard ones are linked
  -- by Neovim itself.
  local links = { action = "@keyword", protocol = "@type", field = "@property", address = "@number" }
  for kind, group in pairs(links) do
    vim.api.nvim_set_hl(0, "@lsp.type." .. kind .. ".pfc", { link = group, default = true })
  end
end

function M.setup(user)
  local opts = vim.tbl_extend("force", { cmd = { "pfc", "lsp" }, targets = {} }, user or {})
  local api = opts.api or M.best_api()
  -- 0.7 detects file types in Vimscript unless told to use filetype.lua, and its
  -- filetype.vim calls a `#`-commented .pf file `conf`.
  if not has("0.8") then
    vim.g.do_filetype_lua = 1
  end
  vim.filetype.add({ extension = { pf = "pfc" } })
  local group = vim.api.nvim_create_augroup("pfc", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = "pfc",
    callback = function(args)
      vim.bo[args.buf].commentstring = "# %s"
      if api == "start" then
        attach_with_start(opts, args.buf)
      elseif api == "start_client" then
        attach_with_start_client(opts, args.buf)
      end
    end,
  })
  if api == "config" then
    local config = server(opts, nil)
    config.root_dir = nil
    config.filetypes = { "pfc" }
    config.root_markers = { ".git" }
    vim.lsp.config("pfc", config)
    vim.lsp.enable("pfc")
  end
  if has("0.9") then
    colours()
  end
  return api
end

return M
