# frozen_string_literal: true

module PtmallocDump
  VERSION = "0.1.0"
end
