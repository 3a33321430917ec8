-- A complete init.lua for pfc: copy it to ~/.config/nvim/init.lua (or add these lines to
-- yours) together with lua/pfc.lua. Works on Neovim 0.7 (Debian 12) and later.
-- `vim.g.pfc_targets` / `vim.g.pfc_api`, if set before (nvim --cmd "let g:pfc_api = 'start'"),
-- override the defaults below. Run from this folder it finds lua/pfc.lua beside it:
--   nvim -u /path/to/pfc/editors/neovim/init.lua policy.pf
local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)")
if here ~= nil then
  vim.opt.runtimepath:prepend(here)
end

require("pfc").setup({
  cmd = { "pfc", "lsp" }, -- or { "/path/to/pfc/.venv/bin/python", "-m", "pfc.lsp" }
  targets = vim.g.pfc_targets or { "xdp", "nft" },
  api = vim.g.pfc_api, -- nil: the newest this Neovim has
})
